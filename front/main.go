// streamwal-front: a node's native gRPC front. It listens where the node's clients
// connect and hands unary Produce calls to the node in batch frames, so the node's
// Python process pays gRPC per frame, not per append; every other call (and a
// Produce the front does not coalesce) goes to the node unchanged. The node starts it
// as a child (node.front: native) and serves its own gRPC on a private Unix socket.
package main

import (
	"crypto/rand"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const produceMethod = "/streamwal.v1.StreamingNode/Produce"

type front struct {
	node       *grpc.ClientConn
	limits     limits
	coalesceAt int // a message larger than this goes alone, as it came
	coalesce   bool

	mu         sync.Mutex
	coalescers map[string]*coalescer

	// what the front did, said when it stops (an operator's check that it batches)
	coalesced, frames, forwarded, retired atomic.Int64
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "host:port the node's clients connect to")
	upstream := flag.String("upstream", "", "the node's own gRPC address (unix:PATH)")
	maxMessage := flag.Int("max-message-bytes", 64<<20, "largest gRPC message either way")
	frameMessages := flag.Int("frame-messages", 1024, "most appends in one batch frame")
	frameBytes := flag.Int("frame-bytes", 4<<20, "most message bytes in one batch frame")
	framesInFlight := flag.Int("frames-in-flight", 2, "most frames unanswered per channel and credentials")
	coalesce := flag.Bool("coalesce", true, "coalesce unary Produce calls (false: forward every call)")
	coalesceAt := flag.Int("coalesce-max-bytes", 256<<10, "a larger message is forwarded alone")
	idleAfter := flag.Duration("idle-after", time.Minute, "a channel's coalescer unused this long is retired (0: never)")
	flag.Parse()
	if *upstream == "" {
		fmt.Fprintln(os.Stderr, "streamwal-front: --upstream is required")
		os.Exit(2)
	}
	dieWithParent()
	node, err := grpc.NewClient(*upstream,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodec(rawCodec{}),
			grpc.MaxCallRecvMsgSize(*maxMessage),
			grpc.MaxCallSendMsgSize(*maxMessage),
		),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "streamwal-front: %v\n", err)
		os.Exit(2)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "streamwal-front: cannot listen on %s: %v\n", *listen, err)
		os.Exit(1)
	}
	f := &front{
		node:       node,
		limits:     limits{frameBytes: *frameBytes, frameMessages: *frameMessages, framesInFlight: *framesInFlight, idleAfter: *idleAfter},
		coalesceAt: *coalesceAt,
		coalesce:   *coalesce,
		coalescers: map[string]*coalescer{},
	}
	srv := grpc.NewServer(
		grpc.ForceServerCodec(rawCodec{}),
		grpc.UnknownServiceHandler(f.handle),
		grpc.MaxRecvMsgSize(*maxMessage),
		grpc.MaxSendMsgSize(*maxMessage),
		// the node's own settings: a vanished client is found by an unanswered ping
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// clients may ping as the Python server lets them
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	// the node reads this line for the port (the configuration may say :0)
	fmt.Printf("listening on %s\n", lis.Addr().String())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		srv.GracefulStop()
	}()
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintf(os.Stderr, "streamwal-front: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "streamwal-front: stopped; %d Produce calls coalesced into %d frames, %d calls forwarded, %d idle coalescers retired\n",
		f.coalesced.Load(), f.frames.Load(), f.forwarded.Load(), f.retired.Load())
}

// dieWithParent ends the front with the node that started it: a node killed with
// SIGKILL must not leave a front answering for it.
func dieWithParent() {
	parent := os.Getppid()
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0)
	if os.Getppid() != parent { // the parent died before the call above
		os.Exit(1)
	}
}

func (f *front) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	if method != produceMethod || !f.coalesce {
		f.forwarded.Add(1)
		return f.proxy(ss, method, nil)
	}
	first := &frame{}
	if err := ss.RecvMsg(first); err != nil {
		return err
	}
	in, _ := metadata.FromIncomingContext(ss.Context())
	p, ok := parseProduce(first.data)
	if !ok || !p.coalesces || !p.hasMsg || len(p.message) > f.coalesceAt || sampled(in) || len(in.Get("grpc-previous-rpc-attempts")) > 0 {
		f.forwarded.Add(1)
		return f.proxy(ss, method, first)
	}
	f.coalesced.Add(1)
	done := make(chan result, 1)
	c := f.acquire(p.pchannel, in)
	defer f.release(c)
	c.queue <- &pending{message: p.message, ids: p.ids, done: done}
	select {
	case r := <-done:
		return reply(ss, r)
	case <-ss.Context().Done():
		// the append may still land: no outcome is said, so the caller takes it as unknown
		return status.FromContextError(ss.Context().Err()).Err()
	}
}

func reply(ss grpc.ServerStream, r result) error {
	if r.err != nil {
		ss.SetTrailer(metadata.Pairs(outcomeKey, r.outcome))
		return r.err
	}
	a := r.answer
	if a.failed {
		outcome := unknown
		if a.outcome == 1 {
			outcome = notWritten
		}
		ss.SetTrailer(metadata.Pairs(outcomeKey, outcome))
		return status.Error(codes.Code(a.code), a.text)
	}
	// a landed append's ProduceResponse has no error field: it is the unary answer
	return ss.SendMsg(&frame{data: a.response})
}

// sampled: the caller's trace is sampled (W3C traceparent, flags bit 0), so the call
// goes to the node alone and its trace shows it whole.
func sampled(md metadata.MD) bool {
	for _, tp := range md.Get("traceparent") {
		parts := strings.Split(tp, "-")
		if len(parts) == 4 && len(parts[3]) == 2 {
			var flags int
			if _, err := fmt.Sscanf(parts[3], "%02x", &flags); err == nil && flags&1 == 1 {
				return true
			}
		}
	}
	return false
}

// acquire the coalescer for the channel and the caller's credentials (calls share a
// frame only when the node would admit each of them the same way), held until
// release: a held coalescer is never retired.
func (f *front) acquire(pchannel string, in metadata.MD) *coalescer {
	auth := strings.Join(in.Get("authorization"), "\x00")
	key := pchannel + "\x00" + auth
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.coalescers[key]
	if !ok {
		md := metadata.MD{}
		if auth != "" {
			md["authorization"] = in.Get("authorization")
		}
		// a frame of many callers' appends is not one caller's trace: the node does
		// not start one for it (a sampled caller's Produce is forwarded alone)
		md.Set("traceparent", unsampledParent())
		c = newCoalescer(f.node, pchannel, md, f.limits, &f.frames, func(c *coalescer) bool { return f.retire(key, c) })
		f.coalescers[key] = c
	}
	c.users++
	return c
}

func (f *front) release(c *coalescer) {
	f.mu.Lock()
	c.users--
	f.mu.Unlock()
}

// retire forgets c if nobody holds it; a later call for its key gets a new one.
func (f *front) retire(key string, c *coalescer) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.users > 0 || f.coalescers[key] != c {
		return false
	}
	delete(f.coalescers, key)
	f.retired.Add(1)
	return true
}

// unsampledParent is a W3C traceparent whose sampled flag is off.
func unsampledParent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("00-%x-%x-00", b[:16], b[16:])
}
