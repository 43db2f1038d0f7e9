package main

import (
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
)

func idleFront(idle time.Duration) *front {
	return &front{
		limits:     limits{frameBytes: 1 << 20, frameMessages: 8, framesInFlight: 2, idleAfter: idle},
		coalescers: map[string]*coalescer{},
	}
}

func count(f *front) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.coalescers)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAnIdleCoalescerIsRetiredAndAFreshOneTakesItsPlace(t *testing.T) {
	f := idleFront(20 * time.Millisecond)
	in := metadata.Pairs("authorization", "Bearer a")
	c := f.acquire("ch", in)
	f.release(c)
	waitFor(t, "the retirement", func() bool { return count(f) == 0 })
	if f.retired.Load() != 1 {
		t.Fatalf("retired %d, want 1", f.retired.Load())
	}
	again := f.acquire("ch", in)
	defer f.release(again)
	if again == c {
		t.Fatal("a retired coalescer was handed out again")
	}
}

func TestAHeldCoalescerIsNeverRetired(t *testing.T) {
	f := idleFront(10 * time.Millisecond)
	c := f.acquire("ch", metadata.MD{})
	time.Sleep(100 * time.Millisecond) // several idle periods
	if count(f) != 1 || f.retired.Load() != 0 {
		t.Fatalf("held coalescer retired: %d left, %d retired", count(f), f.retired.Load())
	}
	f.release(c)
	waitFor(t, "the retirement once released", func() bool { return count(f) == 0 })
}

func TestCoalescersAreKeptPerChannelAndCredentialsAndNeverRetiredWithoutAnIdleTime(t *testing.T) {
	f := idleFront(0)
	a := f.acquire("ch", metadata.Pairs("authorization", "Bearer a"))
	b := f.acquire("ch", metadata.Pairs("authorization", "Bearer b"))
	other := f.acquire("other", metadata.Pairs("authorization", "Bearer a"))
	same := f.acquire("ch", metadata.Pairs("authorization", "Bearer a"))
	for _, c := range []*coalescer{a, b, other, same} {
		f.release(c)
	}
	if a != same || a == b || a == other {
		t.Fatal("coalescers not keyed by channel and credentials")
	}
	time.Sleep(50 * time.Millisecond)
	if count(f) != 3 {
		t.Fatalf("%d coalescers, want 3 (no idle time: none retired)", count(f))
	}
}
