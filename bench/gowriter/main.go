// gowriter writes ConfigMaps the way a Go controller would, as fast as one API server takes
// them: client-go's typed client, N goroutines, no client-side rate limit (QPS -1). It is the
// physical-limit baseline of configmirror's benchmarks.
//
//	gowriter -kubeconfig K -bodies FILE -concurrency N [-verb create|update|delete]
//
// FILE holds one ConfigMap as JSON per line (what configmirror would write). It prints one
// JSON object: writes, errors, the seconds from the first request to the last response, and
// its own CPU seconds (getrusage: user + system) over the whole run.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type result struct {
	Verb        string  `json:"verb"`
	Concurrency int     `json:"concurrency"`
	Writes      int64   `json:"writes"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Seconds     float64 `json:"seconds"`
	CPUSeconds  float64 `json:"cpu_seconds"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	bodies := flag.String("bodies", "", "file of ConfigMaps, one JSON object per line")
	concurrency := flag.Int("concurrency", 4, "goroutines writing at once")
	verb := flag.String("verb", "create", "create (POST), update (PUT) or delete")
	timeout := flag.Duration("timeout", 30*time.Second, "timeout of each request")
	flag.Parse()
	if err := run(*kubeconfig, *bodies, *concurrency, *verb, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "gowriter:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, bodies string, concurrency int, verb string, timeout time.Duration) error {
	if concurrency < 1 {
		return fmt.Errorf("-concurrency must be at least 1, got %d", concurrency)
	}
	objects, err := read(bodies)
	if err != nil {
		return err
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	config.QPS = -1 // no client-side rate limit: the server's pace only
	config.Timeout = timeout
	config.ContentType = "application/json" // the bytes configmirror sends, not protobuf
	config.UserAgent = "gowriter"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	write, err := writer(client, verb)
	if err != nil {
		return err
	}

	work := make(chan *corev1.ConfigMap, len(objects))
	for _, obj := range objects {
		work <- obj
	}
	close(work)
	var writes, errors atomic.Int64
	var firstError atomic.Value
	var wg sync.WaitGroup
	started := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for obj := range work {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				err := write(ctx, obj)
				cancel()
				if err != nil {
					errors.Add(1)
					firstError.CompareAndSwap(nil, fmt.Sprintf("%s %s/%s: %v", verb,
						obj.Namespace, obj.Name, err))
					continue
				}
				writes.Add(1)
			}
		}()
	}
	wg.Wait()
	seconds := time.Since(started).Seconds()
	out := result{Verb: verb, Concurrency: concurrency, Writes: writes.Load(),
		Errors: errors.Load(), Seconds: seconds, CPUSeconds: cpuSeconds()}
	if first, ok := firstError.Load().(string); ok {
		out.FirstError = first
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func writer(client *kubernetes.Clientset, verb string) (func(context.Context, *corev1.ConfigMap) error, error) {
	switch verb {
	case "create":
		return func(ctx context.Context, obj *corev1.ConfigMap) error {
			_, err := client.CoreV1().ConfigMaps(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
			return err
		}, nil
	case "update":
		return func(ctx context.Context, obj *corev1.ConfigMap) error {
			_, err := client.CoreV1().ConfigMaps(obj.Namespace).Update(ctx, obj, metav1.UpdateOptions{})
			return err
		}, nil
	case "delete":
		return func(ctx context.Context, obj *corev1.ConfigMap) error {
			return client.CoreV1().ConfigMaps(obj.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{})
		}, nil
	}
	return nil, fmt.Errorf("-verb must be create, update or delete, got %q", verb)
}

func read(path string) ([]*corev1.ConfigMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var objects []*corev1.ConfigMap
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	for scanner.Scan() {
		if len(scanner.Bytes()) == 0 {
			continue
		}
		obj := &corev1.ConfigMap{}
		if err := json.Unmarshal(scanner.Bytes(), obj); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, len(objects)+1, err)
		}
		objects = append(objects, obj)
	}
	return objects, scanner.Err()
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return -1
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}
