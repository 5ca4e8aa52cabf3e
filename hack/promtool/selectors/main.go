// promql-selectors reads a JSON array of PromQL expressions on stdin and writes, for each, the
// series selectors it contains (metric name and label matchers), as JSON, parsed by
// Prometheus' own parser. The tests use it to check that every metric an alert or a dashboard
// panel reads is one configmirror exports. An expression that does not parse is an error
// naming it (exit 1).
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type matcher struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Value string `json:"value"`
}

type selector struct {
	Name     string    `json:"name"`
	Matchers []matcher `json:"matchers"`
}

type parsed struct {
	Expr      string     `json:"expr"`
	Selectors []selector `json:"selectors"`
}

// promtool's own parser settings: no experimental functions or other features.
var promql = parser.NewParser(parser.Options{})

func selectors(expr string) ([]selector, error) {
	tree, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	found := []selector{}
	parser.Inspect(tree, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		s := selector{Name: vs.Name, Matchers: []matcher{}}
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName {
				if s.Name == "" && m.Type == labels.MatchEqual {
					s.Name = m.Value
				}
				continue
			}
			s.Matchers = append(s.Matchers, matcher{m.Name, m.Type.String(), m.Value})
		}
		found = append(found, s)
		return nil
	})
	return found, nil
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintf(os.Stderr, "promql-selectors: stdin is not a JSON array of strings: %v\n", err)
		os.Exit(2)
	}
	out := make([]parsed, 0, len(exprs))
	for _, expr := range exprs {
		found, err := selectors(expr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "promql-selectors: %q: %v\n", expr, err)
			os.Exit(1)
		}
		out = append(out, parsed{expr, found})
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "promql-selectors: %v\n", err)
		os.Exit(1)
	}
}
