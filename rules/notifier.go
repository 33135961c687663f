package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"

	"github.com/shaledb/shale/internal/promreg"
)

// maxBatchSize is the most alerts one request to an Alertmanager carries.
const maxBatchSize = 256

// alertsPathLabel is the target label of an Alertmanager's alerts path, as
// Prometheus names it for relabel_configs.
const alertsPathLabel = "__alerts_path__"

// notifierAlert is an alert as Alertmanager's API v2 takes it.
type notifierAlert struct {
	Labels       labels.Labels
	Annotations  labels.Labels
	StartsAt     time.Time
	EndsAt       time.Time
	GeneratorURL string
}

// toNotifierAlerts turns a rule's alerts into what is sent: a firing alert
// ends at its ValidUntil (Alertmanager resolves it unless it is sent again
// by then), a resolved one at its resolution.
func toNotifierAlerts(externalURL, expr string, alerts []*Alert) []*notifierAlert {
	out := make([]*notifierAlert, 0, len(alerts))
	gen := externalURL + "/graph?g0.expr=" + url.QueryEscape(expr) + "&g0.tab=1"
	for _, a := range alerts {
		na := &notifierAlert{StartsAt: a.FiredAt, Labels: a.Labels, Annotations: a.Annotations, GeneratorURL: gen, EndsAt: a.ValidUntil}
		if !a.ResolvedAt.IsZero() {
			na.EndsAt = a.ResolvedAt
		}
		out = append(out, na)
	}
	return out
}

// relabelAlerts adds the external labels an alert does not have and
// applies cfgs; alerts dropped by cfgs are left out. Alerts whose labels
// change are copied.
func relabelAlerts(cfgs []*relabel.Config, external labels.Labels, alerts []*notifierAlert) []*notifierAlert {
	if len(cfgs) == 0 && external.IsEmpty() {
		return alerts
	}
	b := labels.NewBuilder(labels.EmptyLabels())
	out := make([]*notifierAlert, 0, len(alerts))
	for _, a := range alerts {
		b.Reset(a.Labels)
		external.Range(func(l labels.Label) {
			if a.Labels.Get(l.Name) == "" {
				b.Set(l.Name, l.Value)
			}
		})
		if !relabel.ProcessBuilder(b, cfgs...) {
			continue
		}
		if ls := b.Labels(); !labels.Equal(ls, a.Labels) {
			c := *a
			c.Labels = ls
			a = &c
		}
		out = append(out, a)
	}
	return out
}

// appendPostableAlerts appends alerts as the JSON body of POST
// /api/v2/alerts: the bytes Prometheus sends (Alertmanager's OpenAPI
// models encoded by encoding/json).
func appendPostableAlerts(dst []byte, alerts []*notifierAlert) ([]byte, error) {
	type postable struct {
		Annotations  map[string]string `json:"annotations,omitempty"`
		EndsAt       string            `json:"endsAt"`
		StartsAt     string            `json:"startsAt"`
		GeneratorURL string            `json:"generatorURL,omitempty"`
		Labels       map[string]string `json:"labels"`
	}
	const format = "2006-01-02T15:04:05.000Z07:00"
	ps := make([]postable, len(alerts))
	for i, a := range alerts {
		ps[i] = postable{
			Annotations: a.Annotations.Map(), EndsAt: a.EndsAt.Format(format), StartsAt: a.StartsAt.Format(format),
			GeneratorURL: a.GeneratorURL, Labels: a.Labels.Map(),
		}
	}
	b, err := json.Marshal(ps)
	return append(dst, b...), err
}

type notifierOptions struct {
	queueCapacity int  // per Alertmanager
	drain         bool // send the queues on stop
	maxBatch      int
}

// notifier sends alerts to the Alertmanagers of the alerting section.
// Each Alertmanager has its own queue and sending goroutine.
type notifier struct {
	opts    notifierOptions
	logger  *slog.Logger
	metrics *notifierMetrics

	mu             sync.RWMutex
	externalLabels labels.Labels
	relabel        []*relabel.Config
	sets           []*amSet
	stopped        bool
}

// amSet is one entry of alerting.alertmanagers: its client, targets and
// queues.
type amSet struct {
	cfg             *AlertmanagerConfig
	client          *http.Client
	active, dropped []*url.URL
	loops           []*sendLoop // one an active URL
}

func newNotifier(opts notifierOptions, reg prometheus.Registerer, logger *slog.Logger) (*notifier, error) {
	n := &notifier{opts: opts, logger: logger}
	var err error
	n.metrics, err = newNotifierMetrics(reg, func() float64 { return float64(len(n.alertmanagers(false))) })
	if err != nil {
		return nil, err
	}
	n.metrics.queueCapacity.Set(float64(opts.queueCapacity))
	return n, nil
}

// applyConfig takes cfg's external labels, alert relabelling and
// Alertmanagers. An entry whose settings did not change keeps its queues.
func (n *notifier) applyConfig(cfg *Config) error {
	var (
		sets  []*amSet
		fresh []*amSet
	)
	n.mu.RLock()
	old := map[string]*amSet{}
	for _, s := range n.sets {
		old[s.cfg.key] = s
	}
	n.mu.RUnlock()
	for _, am := range cfg.Alerting.Alertmanagers {
		if s, ok := old[am.key]; ok && am.key != "" {
			delete(old, am.key)
			sets = append(sets, s)
			continue
		}
		client, err := commoncfg.NewClientFromConfig(am.HTTPClientConfig, "alertmanager")
		if err != nil {
			for _, s := range fresh {
				s.client.CloseIdleConnections()
			}
			return err
		}
		s := &amSet{cfg: am, client: client}
		s.active, s.dropped = n.targets(am)
		sets = append(sets, s)
		fresh = append(fresh, s)
	}
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	for _, s := range fresh {
		for _, u := range s.active {
			s.loops = append(s.loops, n.startLoop(u.String(), s))
		}
	}
	n.externalLabels = cfg.Global.ExternalLabels
	n.relabel = cfg.Alerting.AlertRelabelConfigs
	n.sets = sets
	n.mu.Unlock()
	for _, s := range old {
		s.stop()
	}
	return nil
}

// targets returns the alert URLs of the Alertmanagers of am, and those its
// relabel_configs drop.
func (n *notifier) targets(am *AlertmanagerConfig) (active, dropped []*url.URL) {
	urlOf := func(ls labels.Labels) *url.URL {
		return &url.URL{Scheme: ls.Get(model.SchemeLabel), Host: ls.Get(model.AddressLabel), Path: ls.Get(alertsPathLabel)}
	}
	seen := map[string]bool{}
	b := labels.NewBuilder(labels.EmptyLabels())
	for _, sc := range am.StaticConfigs {
		for _, t := range sc.Targets {
			b.Reset(labels.EmptyLabels())
			b.Set(model.AddressLabel, t)
			b.Set(model.SchemeLabel, am.Scheme)
			b.Set(alertsPathLabel, path.Join("/", am.PathPrefix, "/api/v2/alerts"))
			for k, v := range sc.Labels {
				if k != model.AddressLabel {
					b.Set(string(k), string(v))
				}
			}
			pre := b.Labels()
			if !relabel.ProcessBuilder(b, am.RelabelConfigs...) {
				dropped = append(dropped, urlOf(pre))
				continue
			}
			if addr := b.Get(model.AddressLabel); strings.Contains(addr, "/") {
				n.logger.Error("Creating discovered Alertmanagers failed", "err", fmt.Errorf("%q is not a valid hostname", addr))
				continue
			}
			u := urlOf(b.Labels())
			if !seen[u.String()] {
				seen[u.String()] = true
				active = append(active, u)
			}
		}
	}
	return active, dropped
}

// send queues alerts for every Alertmanager, with the external labels and
// relabelling applied.
func (n *notifier) send(alerts ...*notifierAlert) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.stopped {
		return
	}
	alerts = relabelAlerts(n.relabel, n.externalLabels, alerts)
	if len(alerts) == 0 {
		return
	}
	for _, s := range n.sets {
		as := alerts
		if len(s.cfg.AlertRelabelConfigs) > 0 {
			if as = relabelAlerts(s.cfg.AlertRelabelConfigs, labels.EmptyLabels(), as); len(as) == 0 {
				continue
			}
		}
		for _, l := range s.loops {
			l.add(as)
		}
	}
}

// alertmanagers returns the active (or dropped) Alertmanagers' alert URLs.
func (n *notifier) alertmanagers(dropped bool) []*url.URL {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []*url.URL
	for _, s := range n.sets {
		if dropped {
			out = append(out, s.dropped...)
		} else {
			out = append(out, s.active...)
		}
	}
	return out
}

// stop stops sending, after sending the queues when so configured.
func (n *notifier) stop() {
	n.mu.Lock()
	n.stopped = true
	sets := n.sets
	n.sets = nil
	n.mu.Unlock()
	stopAll(sets)
}

func (s *amSet) stop() {
	stopAll(s.loops)
	s.client.CloseIdleConnections()
}

// sendLoop holds the queue of one Alertmanager and sends it in batches.
type sendLoop struct {
	url    string
	set    *amSet
	n      *notifier
	logger *slog.Logger

	mu    sync.Mutex
	queue []*notifierAlert

	hasWork  chan struct{}
	stopping chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func (n *notifier) startLoop(u string, s *amSet) *sendLoop {
	l := &sendLoop{
		url: u, set: s, n: n, logger: n.logger.With("alertmanager", u),
		queue:   make([]*notifierAlert, 0, min(n.opts.queueCapacity, 1024)),
		hasWork: make(chan struct{}, 1), stopping: make(chan struct{}), done: make(chan struct{}),
	}
	m := n.metrics
	m.dropped.WithLabelValues(u)
	m.errors.WithLabelValues(u)
	m.sent.WithLabelValues(u)
	m.queueLength.WithLabelValues(u)
	go l.loop()
	return l
}

// add queues alerts; beyond the capacity the oldest are dropped.
func (l *sendLoop) add(alerts []*notifierAlert) {
	capacity := l.n.opts.queueCapacity
	l.mu.Lock()
	dropped := 0
	if d := len(alerts) - capacity; d > 0 {
		dropped += d
		alerts = alerts[d:]
	}
	if d := len(l.queue) + len(alerts) - capacity; d > 0 {
		dropped += d
		l.queue = append(l.queue[:0], l.queue[d:]...)
	}
	l.queue = append(l.queue, alerts...)
	l.n.metrics.queueLength.WithLabelValues(l.url).Set(float64(len(l.queue)))
	l.mu.Unlock()
	if dropped > 0 {
		l.logger.Warn("Alert notification queue full, dropping alerts", "count", dropped)
		l.n.metrics.dropped.WithLabelValues(l.url).Add(float64(dropped))
	}
	select {
	case l.hasWork <- struct{}{}:
	default:
	}
}

func (l *sendLoop) queueLen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

func (l *sendLoop) nextBatch() []*notifierAlert {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := min(len(l.queue), l.n.opts.maxBatch)
	batch := append([]*notifierAlert(nil), l.queue[:k]...)
	l.queue = append(l.queue[:0], l.queue[k:]...)
	l.n.metrics.queueLength.WithLabelValues(l.url).Set(float64(len(l.queue)))
	return batch
}

func (l *sendLoop) loop() {
	defer close(l.done)
	for {
		select {
		case <-l.stopping:
			return
		case <-l.hasWork:
		}
		select {
		case <-l.stopping:
			return
		default:
		}
		l.sendOneBatch()
		if l.queueLen() > 0 {
			select {
			case l.hasWork <- struct{}{}:
			default:
			}
		}
	}
}

// stop ends the loop, then sends or drops what is queued.
func (l *sendLoop) stop() {
	l.stopOnce.Do(func() {
		close(l.stopping)
		<-l.done
		m := l.n.metrics
		if l.n.opts.drain {
			for l.queueLen() > 0 {
				l.sendOneBatch()
			}
		} else if k := l.queueLen(); k > 0 {
			l.logger.Warn("Alert notification queue not drained on shutdown, dropping alerts", "count", k)
			m.dropped.WithLabelValues(l.url).Add(float64(k))
		}
		m.latency.DeleteLabelValues(l.url)
		m.latencyHist.DeleteLabelValues(l.url)
		m.sent.DeleteLabelValues(l.url)
		m.dropped.DeleteLabelValues(l.url)
		m.errors.DeleteLabelValues(l.url)
		m.queueLength.DeleteLabelValues(l.url)
	})
}

func (l *sendLoop) sendOneBatch() {
	batch := l.nextBatch()
	if len(batch) == 0 {
		return
	}
	m := l.n.metrics
	begin := time.Now()
	if err := l.post(batch); err != nil {
		l.logger.Error("Error sending alerts", "count", len(batch), "err", err)
		m.errors.WithLabelValues(l.url).Add(float64(len(batch)))
		m.dropped.WithLabelValues(l.url).Add(float64(len(batch)))
		return
	}
	d := time.Since(begin).Seconds()
	m.latency.WithLabelValues(l.url).Observe(d)
	m.latencyHist.WithLabelValues(l.url).Observe(d)
	m.sent.WithLabelValues(l.url).Add(float64(len(batch)))
}

func (l *sendLoop) post(batch []*notifierAlert) error {
	body, err := appendPostableAlerts(nil, batch)
	if err != nil {
		return fmt.Errorf("encode alerts: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(l.set.cfg.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "Shale")
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.set.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("bad response status %s", resp.Status)
	}
	return nil
}

// notifierMetrics are Prometheus' prometheus_notifications_* series.
type notifierMetrics struct {
	latency                   *prometheus.SummaryVec
	latencyHist               *prometheus.HistogramVec
	errors, sent, dropped     *prometheus.CounterVec
	queueLength               *prometheus.GaugeVec
	queueCapacity             prometheus.Gauge
	alertmanagersDiscoveredFn prometheus.GaugeFunc
}

func newNotifierMetrics(reg prometheus.Registerer, discovered func() float64) (*notifierMetrics, error) {
	am := []string{"alertmanager"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, am)
	}
	m := &notifierMetrics{
		latency: prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name: "prometheus_notifications_latency_seconds", Help: "Latency quantiles for sending alert notifications.",
			Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001},
		}, am),
		latencyHist: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "prometheus_notifications_latency_histogram_seconds", Help: "Latency histogram for sending alert notifications.",
			Buckets:                     []float64{.01, .1, 1, 10},
			NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 100, NativeHistogramMinResetDuration: time.Hour,
		}, am),
		errors:  counter("prometheus_notifications_errors_total", "Total number of sent alerts affected by errors."),
		sent:    counter("prometheus_notifications_sent_total", "Total number of alerts sent."),
		dropped: counter("prometheus_notifications_dropped_total", "Total number of alerts dropped due to errors when sending to Alertmanager."),
		queueLength: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "prometheus_notifications_queue_length", Help: "The number of alert notifications in the queue.",
		}, am),
		queueCapacity: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "prometheus_notifications_queue_capacity", Help: "The capacity of the alert notifications queue.",
		}),
		alertmanagersDiscoveredFn: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "prometheus_notifications_alertmanagers_discovered", Help: "The number of alertmanagers discovered and active.",
		}, discovered),
	}
	err := errors.Join(
		promreg.Register(reg, &m.latency), promreg.Register(reg, &m.latencyHist),
		promreg.Register(reg, &m.errors), promreg.Register(reg, &m.sent), promreg.Register(reg, &m.dropped),
		promreg.Register(reg, &m.queueLength), promreg.Register(reg, &m.queueCapacity),
	)
	if err == nil && reg != nil {
		// A GaugeFunc reads this notifier: never shared.
		err = reg.Register(m.alertmanagersDiscoveredFn)
	}
	if err != nil {
		return nil, fmt.Errorf("register notification metrics: %w", err)
	}
	return m, nil
}
