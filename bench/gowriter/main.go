// gowriter writes ConfigMaps the way a Go controller would, as fast as one API server takes
// them: client-go's typed client, N goroutines, no client-side rate limit (QPS -1). It is the
// physical-limit baseline of configmirror's benchmarks.
//
//	gowriter -kubeconfig K -bodies FILE -concurrency N [-verb create|update|delete]
//	         [-informer [-selector S] [-informer-timeout D]]
//
// FILE holds one ConfigMap as JSON per line (what configmirror would write). It prints one
// JSON object: writes, errors, the seconds from the first request to the last response, and
// its own CPU seconds (getrusage: user + system) over the whole run.
//
// With -informer it also watches what it writes, as an operator must: a client-go shared
// informer on the ConfigMaps of every namespace that match -selector (the replicas' label),
// started and synced before the first write. After the last write it waits (at most
// -informer-timeout) until the informer has seen every write: the event of the resourceVersion
// each create or update returned, or each deletion. Its CPU seconds then include the watch.
// The JSON adds informer_seen (writes the informer saw), informer_events (events it delivered,
// the initial list's included), informer_sync_seconds (start to synced) and
// informer_wait_seconds (last response to the last write seen, or to the timeout).
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
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
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
	// The process's peak resident set: with -informer, a cache holding what it wrote.
	MaxRSSBytes int64 `json:"max_rss_bytes"`
	// -informer only
	InformerSeen        *int64   `json:"informer_seen,omitempty"`
	InformerEvents      *int64   `json:"informer_events,omitempty"`
	InformerSyncSeconds *float64 `json:"informer_sync_seconds,omitempty"`
	InformerWaitSeconds *float64 `json:"informer_wait_seconds,omitempty"`
}

// options are the command line's.
type options struct {
	kubeconfig, bodies, verb, selector string
	concurrency                        int
	timeout, informerTimeout           time.Duration
	informer                           bool
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	bodies := flag.String("bodies", "", "file of ConfigMaps, one JSON object per line")
	concurrency := flag.Int("concurrency", 4, "goroutines writing at once")
	verb := flag.String("verb", "create", "create (POST), update (PUT) or delete")
	timeout := flag.Duration("timeout", 30*time.Second, "timeout of each request")
	informer := flag.Bool("informer", false,
		"also run a shared informer on the ConfigMaps written, and wait until it has seen every write")
	selector := flag.String("selector", "configmirror.io/replica=true",
		"with -informer: the label selector of the ConfigMaps it watches (the bodies must match it)")
	informerTimeout := flag.Duration("informer-timeout", 5*time.Minute,
		"with -informer: how long to wait for it to sync, and after the last write for it to see them all")
	flag.Parse()
	opts := options{kubeconfig: *kubeconfig, bodies: *bodies, verb: *verb, selector: *selector,
		concurrency: *concurrency, timeout: *timeout, informerTimeout: *informerTimeout,
		informer: *informer}
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "gowriter:", err)
		os.Exit(1)
	}
}

func run(opts options) error {
	concurrency, verb, timeout := opts.concurrency, opts.verb, opts.timeout
	if concurrency < 1 {
		return fmt.Errorf("-concurrency must be at least 1, got %d", concurrency)
	}
	objects, err := read(opts.bodies)
	if err != nil {
		return err
	}
	config, err := clientcmd.BuildConfigFromFlags("", opts.kubeconfig)
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
	var watch *watcher
	if opts.informer {
		if watch, err = startWatcher(client, opts.selector, verb == "delete", opts.informerTimeout); err != nil {
			return err
		}
		defer watch.stop()
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
				version, err := write(ctx, obj)
				cancel()
				if err != nil {
					errors.Add(1)
					firstError.CompareAndSwap(nil, fmt.Sprintf("%s %s/%s: %v", verb,
						obj.Namespace, obj.Name, err))
					continue
				}
				writes.Add(1)
				if watch != nil {
					watch.wrote(obj.Namespace+"/"+obj.Name, version)
				}
			}
		}()
	}
	wg.Wait()
	seconds := time.Since(started).Seconds()
	out := result{Verb: verb, Concurrency: concurrency, Writes: writes.Load(),
		Errors: errors.Load(), Seconds: seconds}
	if watch != nil {
		waited := watch.wait(writes.Load(), opts.informerTimeout)
		seen, events := watch.counts()
		out.InformerSeen, out.InformerEvents = &seen, &events
		out.InformerSyncSeconds, out.InformerWaitSeconds = &watch.syncSeconds, &waited
	}
	out.CPUSeconds = cpuSeconds() // after the informer's wait: its watching counts
	out.MaxRSSBytes = maxRSSBytes()
	if first, ok := firstError.Load().(string); ok {
		out.FirstError = first
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// writer returns the write of one ConfigMap; it answers the resourceVersion the server gave
// the object written (none for a deletion).
func writer(client *kubernetes.Clientset, verb string) (func(context.Context, *corev1.ConfigMap) (string, error), error) {
	switch verb {
	case "create":
		return func(ctx context.Context, obj *corev1.ConfigMap) (string, error) {
			done, err := client.CoreV1().ConfigMaps(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
			if err != nil {
				return "", err
			}
			return done.ResourceVersion, nil
		}, nil
	case "update":
		return func(ctx context.Context, obj *corev1.ConfigMap) (string, error) {
			done, err := client.CoreV1().ConfigMaps(obj.Namespace).Update(ctx, obj, metav1.UpdateOptions{})
			if err != nil {
				return "", err
			}
			return done.ResourceVersion, nil
		}, nil
	case "delete":
		return func(ctx context.Context, obj *corev1.ConfigMap) (string, error) {
			return "", client.CoreV1().ConfigMaps(obj.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{})
		}, nil
	}
	return nil, fmt.Errorf("-verb must be create, update or delete, got %q", verb)
}

// watcher is a shared informer on the ConfigMaps written, and the tally of the writes it saw:
// a create or an update is seen once the informer delivered the resourceVersion the write
// returned (before or after the response came), a deletion once it delivered the deletion.
type watcher struct {
	factory     informers.SharedInformerFactory
	cancel      context.CancelFunc
	deletes     bool
	syncSeconds float64

	mu       sync.Mutex
	versions map[string]map[string]struct{} // key: every resourceVersion delivered
	deleted  map[string]struct{}            // keys whose deletion was delivered
	pending  map[string]string              // writes answered, not yet seen: key -> version
	seen     int64
	events   int64
	target   int64         // the writes to see; -1 until the last write answered
	all      chan struct{} // closed once seen reaches target
	closed   bool
}

func startWatcher(client kubernetes.Interface, selector string, deletes bool, timeout time.Duration) (*watcher, error) {
	w := &watcher{deletes: deletes, versions: map[string]map[string]struct{}{},
		deleted: map[string]struct{}{}, pending: map[string]string{}, target: -1,
		all: make(chan struct{})}
	w.factory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	informer := w.factory.Core().V1().ConfigMaps().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.delivered,
		UpdateFunc: func(_, obj any) { w.delivered(obj) },
		DeleteFunc: w.deletion,
	}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	started := time.Now()
	w.factory.StartWithContext(ctx)
	syncCtx, syncCancel := context.WithTimeout(ctx, timeout)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		w.stop()
		return nil, fmt.Errorf("the informer (selector %q) did not sync within %s", selector, timeout)
	}
	w.syncSeconds = time.Since(started).Seconds()
	return w, nil
}

func (w *watcher) delivered(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	key := cm.Namespace + "/" + cm.Name
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	if w.versions[key] == nil {
		w.versions[key] = map[string]struct{}{}
	}
	w.versions[key][cm.ResourceVersion] = struct{}{}
	if version, ok := w.pending[key]; ok && !w.deletes && version == cm.ResourceVersion {
		delete(w.pending, key)
		w.count()
	}
}

func (w *watcher) deletion(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	w.deleted[key] = struct{}{}
	if _, ok := w.pending[key]; ok && w.deletes {
		delete(w.pending, key)
		w.count()
	}
}

// wrote records one write the server answered.
func (w *watcher) wrote(key, version string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deletes {
		if _, ok := w.deleted[key]; ok {
			w.count()
			return
		}
	} else if _, ok := w.versions[key][version]; ok {
		w.count()
		return
	}
	w.pending[key] = version
}

func (w *watcher) count() { // w.mu held
	w.seen++
	w.check()
}

func (w *watcher) check() { // w.mu held
	if !w.closed && w.target >= 0 && w.seen >= w.target {
		w.closed = true
		close(w.all)
	}
}

// wait waits until the informer has seen `writes` writes, or `timeout`; it answers the seconds
// it waited.
func (w *watcher) wait(writes int64, timeout time.Duration) float64 {
	started := time.Now()
	w.mu.Lock()
	w.target = writes
	w.check()
	w.mu.Unlock()
	select {
	case <-w.all:
	case <-time.After(timeout):
	}
	return time.Since(started).Seconds()
}

func (w *watcher) counts() (seen, events int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen, w.events
}

func (w *watcher) stop() {
	w.cancel()
	w.factory.Shutdown()
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

// maxRSSBytes is the peak resident set of this process (Linux reports it in KiB).
func maxRSSBytes() int64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return -1
	}
	return usage.Maxrss * 1024
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return -1
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}
