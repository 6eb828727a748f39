package monitor

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	resource "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"
)

// forwardQueue bounds the metric and log exports waiting to go upstream; beyond it they are
// dropped (and counted), never waited for.
const forwardQueue = 256

// forwarder sends the metric and log exports a session's receiver took upstream as they came
// (the SDK's exporters this module builds with are for traces), with the session as resource
// attributes, from one goroutine of its own.
type forwarder struct {
	endpoint string
	client   *http.Client
	queue    chan forwardItem
	dropped  atomic.Int64
	done     chan struct{}
	once     sync.Once
}

type forwardItem struct {
	path string
	body []byte
}

func newForwarder(endpoint string) *forwarder {
	f := &forwarder{endpoint: endpoint, client: &http.Client{Timeout: 10 * time.Second},
		queue: make(chan forwardItem, forwardQueue), done: make(chan struct{})}
	go f.loop()
	return f
}

// Forward queues req (an OTLP metrics or logs export the receiver decoded, now the forwarder's)
// for path, with allox.agent_id and allox.session_id on each resource; it never blocks.
func (f *forwarder) Forward(path, agent, session string, req proto.Message) {
	attrs := []*common.KeyValue{
		{Key: "allox.agent_id", Value: &common.AnyValue{Value: &common.AnyValue_StringValue{StringValue: agent}}},
		{Key: "allox.session_id", Value: &common.AnyValue{Value: &common.AnyValue_StringValue{StringValue: session}}},
	}
	stamp := func(r **resource.Resource) {
		if *r == nil {
			*r = &resource.Resource{}
		}
		(*r).Attributes = append((*r).Attributes, attrs...)
	}
	switch x := req.(type) {
	case *colmetrics.ExportMetricsServiceRequest:
		for _, rm := range x.ResourceMetrics {
			stamp(&rm.Resource)
		}
	case *collogs.ExportLogsServiceRequest:
		for _, rl := range x.ResourceLogs {
			stamp(&rl.Resource)
		}
	default:
		return
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return
	}
	select {
	case f.queue <- forwardItem{path, body}:
	default:
		f.dropped.Add(1)
	}
}

func (f *forwarder) loop() {
	defer close(f.done)
	for it := range f.queue {
		resp, err := f.client.Post(f.endpoint+it.path, ctProtobuf, bytes.NewReader(it.body))
		if err != nil {
			f.dropped.Add(1)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			f.dropped.Add(1)
		}
	}
}

// shutdown sends what is queued (until ctx ends) and stops.
func (f *forwarder) shutdown(ctx context.Context) {
	f.once.Do(func() { close(f.queue) })
	select {
	case <-f.done:
	case <-ctx.Done():
	}
}
