package main

// Unary Produce calls waiting at the same time for the same channel, from callers
// with the same credentials, reach the node as one ProduceBatchStream frame of
// separate appends (independent: each is answered alone, as its own Produce would
// be). One stream per (channel, credentials), with at most framesInFlight frames
// unanswered on it: a frame holds what waited while the node worked on the ones
// before, so one caller alone is sent at once and many callers share frames (the
// node's cost is per frame, about that of one unary call). A coalescer nobody used
// for idleAfter retires: its stream ends and the front forgets it, so a front that
// saw many channels or tokens does not keep a goroutine and a stream for each.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	batchStreamMethod = "/streamwal.v1.StreamingNode/ProduceBatchStream"
	outcomeKey        = "streamwal-write-outcome"
	notWritten        = "not-written"
	unknown           = "unknown"
)

// pending is one caller's append and where its answer goes.
type pending struct {
	message []byte
	ids     []byte
	done    chan result
}

type result struct {
	answer  answer
	err     error  // the append's status when not answered in band
	outcome string // with err: what the log holds of it
}

type coalescer struct {
	node     *grpc.ClientConn
	pchannel string
	md       metadata.MD
	queue    chan *pending
	limits   limits
	slots    chan struct{} // a token per frame sent and not answered yet
	frames   *atomic.Int64
	// retire asks the front to forget this coalescer: true when nobody holds it
	retire func(*coalescer) bool
	users  int // callers holding it (the front's mutex guards it)

	mu     sync.Mutex
	stream *batchStream
}

type limits struct {
	frameBytes     int
	frameMessages  int
	framesInFlight int
	idleAfter      time.Duration // 0: never retire
}

// batchStream is one ProduceBatchStream to the node with the frames sent on it and
// not answered yet, in order.
type batchStream struct {
	cs       grpc.ClientStream
	cancel   context.CancelFunc
	closed   bool
	inflight [][]*pending
}

func newCoalescer(node *grpc.ClientConn, pchannel string, md metadata.MD, l limits, frames *atomic.Int64, retire func(*coalescer) bool) *coalescer {
	c := &coalescer{node: node, pchannel: pchannel, md: md, limits: l, frames: frames, retire: retire, queue: make(chan *pending, 4*l.frameMessages), slots: make(chan struct{}, l.framesInFlight)}
	go c.run()
	return c
}

func (c *coalescer) run() {
	var idle <-chan time.Time
	var timer *time.Timer
	if c.limits.idleAfter > 0 {
		timer = time.NewTimer(c.limits.idleAfter)
		defer timer.Stop()
		idle = timer.C
	}
	for {
		select {
		case first := <-c.queue:
			c.slots <- struct{}{} // what arrives meanwhile joins this frame
			batch := []*pending{first}
			size := len(first.message)
		drain:
			for len(batch) < c.limits.frameMessages && size < c.limits.frameBytes {
				select {
				case p := <-c.queue:
					batch = append(batch, p)
					size += len(p.message)
				default:
					break drain
				}
			}
			c.send(batch)
			if timer != nil {
				timer.Reset(c.limits.idleAfter)
			}
		case <-idle:
			if c.retire(c) { // nobody holds it, so nothing is queued or in flight
				c.end()
				return
			}
			timer.Reset(c.limits.idleAfter)
		}
	}
}

// end closes the stream to the node, if one is open.
func (c *coalescer) end() {
	c.mu.Lock()
	s := c.stream
	c.stream = nil
	c.mu.Unlock()
	if s != nil {
		_ = s.cs.CloseSend()
		s.cancel()
	}
}

func (c *coalescer) send(batch []*pending) {
	s, err := c.current()
	if err != nil {
		// no stream to the node: nothing of this batch was sent
		<-c.slots
		fail(batch, err, notWritten)
		return
	}
	messages := make([][]byte, len(batch))
	ids := make([][]byte, len(batch))
	for i, p := range batch {
		messages[i], ids[i] = p.message, p.ids
	}
	c.mu.Lock()
	if s.closed {
		c.mu.Unlock()
		<-c.slots
		fail(batch, status.Error(codes.Unavailable, "the node's batch stream ended"), notWritten)
		return
	}
	s.inflight = append(s.inflight, batch)
	c.mu.Unlock()
	c.frames.Add(1)
	// a failed send ends the stream: its status reaches the receiver, which answers
	// every frame in flight (this one included)
	_ = s.cs.SendMsg(&frame{data: batchFrame(c.pchannel, messages, ids)})
}

// current is the open stream, or a new one once the last has ended.
func (c *coalescer) current() (*batchStream, error) {
	c.mu.Lock()
	s := c.stream
	c.mu.Unlock()
	if s != nil && !s.closed {
		return s, nil
	}
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), c.md))
	cs, err := c.node.NewStream(ctx, anyStream, batchStreamMethod)
	if err != nil {
		cancel()
		return nil, err
	}
	s = &batchStream{cs: cs, cancel: cancel}
	c.mu.Lock()
	c.stream = s
	c.mu.Unlock()
	go c.receive(s)
	return s, nil
}

func (c *coalescer) receive(s *batchStream) {
	defer s.cancel()
	for {
		m := &frame{}
		err := s.cs.RecvMsg(m)
		var answers []answer
		if err == nil {
			answers, err = batchAnswers(m.data)
		}
		c.mu.Lock()
		if err != nil {
			s.closed = true
			left := s.inflight
			s.inflight = nil
			c.mu.Unlock()
			code := status.Code(err)
			outcome := unknown
			if code == codes.Unauthenticated || code == codes.PermissionDenied {
				outcome = notWritten // refused before any frame was read
			}
			if code == codes.OK {
				err = status.Error(codes.Unavailable, "the node's batch stream ended")
			}
			for _, b := range left {
				<-c.slots
				fail(b, err, outcome)
			}
			return
		}
		batch := s.inflight[0]
		s.inflight = s.inflight[1:]
		c.mu.Unlock()
		<-c.slots
		if len(answers) != len(batch) {
			fail(batch, status.Errorf(codes.Internal, "the node answered %d of %d appends", len(answers), len(batch)), unknown)
			continue
		}
		for i, p := range batch {
			p.done <- result{answer: answers[i]}
		}
	}
}

func fail(batch []*pending, err error, outcome string) {
	for _, p := range batch {
		p.done <- result{err: err, outcome: outcome}
	}
}
