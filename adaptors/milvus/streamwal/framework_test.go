//go:build test

package streamwal

import (
	"os"
	"strconv"
	"testing"

	"github.com/milvus-io/milvus/pkg/v2/streaming/walimpls"
)

// Environment of TestWALImplsFramework (tests/milvus/test_walimpls_framework.py sets
// it after starting a node).
const (
	envNode     = "STREAMWAL_MILVUS_NODE"      // host:port of a running streamwal node
	envMessages = "STREAMWAL_MILVUS_MESSAGES"  // messages per term per channel
	envReadOnly = "STREAMWAL_MILVUS_READ_ONLY" // "1": every read is a read-only read
)

// defaultMessages is the count Milvus's own Pulsar and Kafka tests run the framework
// with.
const defaultMessages = 100

// TestWALImplsFramework runs Milvus's own walimpls conformance framework against
// the node at $STREAMWAL_MILVUS_NODE.
func TestWALImplsFramework(t *testing.T) {
	endpoint := os.Getenv(envNode)
	if endpoint == "" {
		t.Skipf("set %s=host:port of a running streamwal node", envNode)
	}
	count := defaultMessages
	if text := os.Getenv(envMessages); text != "" {
		n, err := strconv.Atoi(text)
		if err != nil || n < 2 {
			t.Fatalf("%s=%q: want an integer of at least 2", envMessages, text)
		}
		count = n
	}
	var opts []Option
	if os.Getenv(envReadOnly) == "1" {
		opts = append(opts, WithReadOnlyReads())
	}
	walimpls.NewWALImplsTestFramework(t, count, NewOpenerBuilder(endpoint, opts...)).Run()
}
