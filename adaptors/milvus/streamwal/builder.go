// Package streamwal implements Milvus's WAL backend contract (walimpls) over a
// streamwal node's gRPC API, one call to one RPC, so Milvus's own conformance
// framework can run against a real node.
package streamwal

import (
	"context"

	"github.com/cockroachdb/errors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/milvus-io/milvus/pkg/v2/streaming/util/message"
	"github.com/milvus-io/milvus/pkg/v2/streaming/util/types"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls"
	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls/helper"

	pb "streamwal/adaptors/milvus/streamingpb"
)

// WALName is the name this backend gives Milvus (see MessageID.WALName for why).
const WALName = message.WALNamePulsar

var (
	_ walimpls.OpenerBuilderImpls = (*OpenerBuilder)(nil)
	_ walimpls.OpenerImpls        = (*opener)(nil)
)

// Option changes how an OpenerBuilder's WALs talk to the node.
type Option func(*OpenerBuilder)

// WithReadOnlyReads makes every Read of every WAL, read-write ones included, a
// read-only read (ConsumeRequest.read_only): the path a reader that does not own the
// channel takes, so one run of Milvus's framework covers it.
func WithReadOnlyReads() Option {
	return func(b *OpenerBuilder) { b.readOnlyReads = true }
}

// WithDialOptions replaces the gRPC dial options (default: plaintext).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(b *OpenerBuilder) { b.dialOptions = opts }
}

// OpenerBuilder builds openers that reach one streamwal node at endpoint (host:port).
type OpenerBuilder struct {
	endpoint      string
	readOnlyReads bool
	dialOptions   []grpc.DialOption
}

// NewOpenerBuilder is Milvus's OpenerBuilderImpls for the node at endpoint.
func NewOpenerBuilder(endpoint string, opts ...Option) *OpenerBuilder {
	b := &OpenerBuilder{
		endpoint:    endpoint,
		dialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
	}
	for _, opt := range opts {
		opt(b)
	}
	return b
}

// Name is the WAL name Milvus registers the builder under.
func (b *OpenerBuilder) Name() message.WALName { return WALName }

// Build opens one gRPC connection, shared by every WAL the opener opens.
func (b *OpenerBuilder) Build() (walimpls.OpenerImpls, error) {
	if b.endpoint == "" {
		return nil, errors.New("streamwal: no node endpoint")
	}
	conn, err := grpc.NewClient(b.endpoint, b.dialOptions...)
	if err != nil {
		return nil, errors.Wrapf(err, "streamwal: dial %s", b.endpoint)
	}
	return &opener{conn: conn, client: pb.NewStreamingNodeClient(conn), readOnlyReads: b.readOnlyReads}, nil
}

type opener struct {
	conn          *grpc.ClientConn
	client        pb.StreamingNodeClient
	readOnlyReads bool
}

// Open with RW assigns the channel to the node under the caller's term
// (AssignChannel): the node refuses a term below the channel's, accepts the same
// owner again at an equal one, and fences any other owner. RO calls nothing: a
// read-only WAL owns nothing, its reads say read_only.
func (o *opener) Open(ctx context.Context, opt *walimpls.OpenOption) (walimpls.WALImpls, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	if opt.Channel.AccessMode == types.AccessModeRW {
		term := uint64(opt.Channel.Term)
		if _, err := o.client.AssignChannel(ctx, &pb.AssignChannelRequest{
			Pchannel: opt.Channel.Name,
			Term:     &term,
		}); err != nil {
			return nil, errors.Wrapf(err, "streamwal: assign %s at term %d", opt.Channel.Name, term)
		}
	}
	return &wal{
		WALHelper:     helper.NewWALHelper(opt),
		client:        o.client,
		readOnlyReads: o.readOnlyReads || opt.Channel.AccessMode == types.AccessModeRO,
	}, nil
}

// Close closes the connection; the channels stay as their WALs left them.
func (o *opener) Close() {
	_ = o.conn.Close()
}
