package clock

import (
	"sync"
	"testing"
	"time"
)

var epoch = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func recv(ch <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-ch:
		return t, true
	default:
		return time.Time{}, false
	}
}

func TestManualNowAndSince(t *testing.T) {
	m := NewManual(epoch)
	if got := m.Now(); !got.Equal(epoch) {
		t.Fatalf("Now() = %v, want %v", got, epoch)
	}
	m.Advance(1500 * time.Millisecond)
	if got := m.Since(epoch); got != 1500*time.Millisecond {
		t.Fatalf("Since(epoch) = %v after Advance(1.5s), want 1.5s", got)
	}
	m.Set(epoch.Add(time.Hour))
	if got := m.Since(epoch); got != time.Hour {
		t.Fatalf("Since(epoch) = %v after Set(+1h), want 1h", got)
	}
}

func TestManualAfter(t *testing.T) {
	tests := []struct {
		name     string
		after    time.Duration
		advances []time.Duration
		fired    []bool // after each advance
	}{
		{"zero fires at once", 0, nil, nil},
		{"negative fires at once", -time.Second, nil, nil},
		{"exact deadline", time.Second, []time.Duration{time.Second}, []bool{true}},
		{"in steps", time.Second, []time.Duration{400 * time.Millisecond, 599 * time.Millisecond, time.Millisecond}, []bool{false, false, true}},
		{"past the deadline", time.Second, []time.Duration{time.Hour}, []bool{true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewManual(epoch)
			ch := m.After(tt.after)
			if tt.after <= 0 {
				if got, ok := recv(ch); !ok || !got.Equal(epoch) {
					t.Fatalf("After(%v) = %v, %v; want %v at once", tt.after, got, ok, epoch)
				}
				if m.Waiters() != 0 {
					t.Fatalf("Waiters() = %d after an immediate After, want 0", m.Waiters())
				}
				return
			}
			for i, d := range tt.advances {
				m.Advance(d)
				got, ok := recv(ch)
				if ok != tt.fired[i] {
					t.Fatalf("after advance %d (%v): fired %v, want %v", i, d, ok, tt.fired[i])
				}
				if ok && !got.Equal(epoch.Add(tt.after)) {
					t.Fatalf("After delivered %v, want its deadline %v", got, epoch.Add(tt.after))
				}
			}
			if m.Waiters() != 0 {
				t.Fatalf("Waiters() = %d after the After fired, want 0", m.Waiters())
			}
		})
	}
}

// An Advance fires exactly the waiters due by the new time, each with its
// own deadline.
func TestManualFiresInDeadlineOrder(t *testing.T) {
	m := NewManual(epoch)
	a := m.After(3 * time.Second)
	b := m.After(time.Second)
	c := m.After(time.Second)
	m.Advance(time.Second)
	if _, ok := recv(a); ok {
		t.Fatal("the 3 s After fired at 1 s")
	}
	tb, okb := recv(b)
	tc, okc := recv(c)
	if !okb || !okc || !tb.Equal(epoch.Add(time.Second)) || !tc.Equal(tb) {
		t.Fatalf("1 s Afters: %v %v, %v %v; want both at %v", tb, okb, tc, okc, epoch.Add(time.Second))
	}
	m.Advance(2 * time.Second)
	if _, ok := recv(a); !ok {
		t.Fatal("the 3 s After did not fire at 3 s")
	}
}

func TestManualSleep(t *testing.T) {
	m := NewManual(epoch)
	m.Sleep(0) // returns at once
	var woke sync.WaitGroup
	woke.Add(2)
	for range 2 {
		go func() {
			defer woke.Done()
			m.Sleep(time.Minute)
		}()
	}
	m.BlockUntil(2)
	m.Advance(59 * time.Second)
	if m.Waiters() != 2 {
		t.Fatalf("Waiters() = %d before the sleepers' deadline, want 2", m.Waiters())
	}
	m.Advance(time.Second)
	woke.Wait()
	if m.Waiters() != 0 {
		t.Fatalf("Waiters() = %d after the sleepers woke, want 0", m.Waiters())
	}
}

func TestManualTicker(t *testing.T) {
	m := NewManual(epoch)
	tk := m.NewTicker(time.Second)
	m.Advance(500 * time.Millisecond)
	if _, ok := recv(tk.C()); ok {
		t.Fatal("ticked before its period")
	}
	m.Advance(500 * time.Millisecond)
	if got, ok := recv(tk.C()); !ok || !got.Equal(epoch.Add(time.Second)) {
		t.Fatalf("tick = %v, %v; want %v", got, ok, epoch.Add(time.Second))
	}
	// An advance over several periods ticks once; the next tick stays on
	// the period grid.
	m.Advance(3500 * time.Millisecond) // now 4.5 s
	if got, ok := recv(tk.C()); !ok || !got.Equal(epoch.Add(2*time.Second)) {
		t.Fatalf("tick over several periods = %v, %v; want the first due, %v", got, ok, epoch.Add(2*time.Second))
	}
	if _, ok := recv(tk.C()); ok {
		t.Fatal("more than one tick in one Advance")
	}
	m.Advance(400 * time.Millisecond) // 4.9 s
	if _, ok := recv(tk.C()); ok {
		t.Fatal("ticked off the period grid")
	}
	m.Advance(100 * time.Millisecond) // 5 s
	if got, ok := recv(tk.C()); !ok || !got.Equal(epoch.Add(5*time.Second)) {
		t.Fatalf("tick = %v, %v; want %v", got, ok, epoch.Add(5*time.Second))
	}
	// A tick the reader has not taken is not queued twice.
	m.Advance(time.Second)
	m.Advance(time.Second)
	if got, ok := recv(tk.C()); !ok || !got.Equal(epoch.Add(6*time.Second)) {
		t.Fatalf("tick = %v, %v; want the first untaken, %v", got, ok, epoch.Add(6*time.Second))
	}
	if _, ok := recv(tk.C()); ok {
		t.Fatal("a dropped tick was delivered")
	}
	tk.Stop()
	if m.Waiters() != 0 {
		t.Fatalf("Waiters() = %d after Stop, want 0", m.Waiters())
	}
	m.Advance(time.Hour)
	if _, ok := recv(tk.C()); ok {
		t.Fatal("ticked after Stop")
	}
}

func TestManualPanics(t *testing.T) {
	for _, tt := range []struct {
		name string
		fn   func(*Manual)
	}{
		{"ticker zero", func(m *Manual) { m.NewTicker(0) }},
		{"advance negative", func(m *Manual) { m.Advance(-1) }},
		{"set backwards", func(m *Manual) { m.Set(epoch.Add(-1)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatalf("%s did not panic", tt.name)
				}
			}()
			tt.fn(NewManual(epoch))
		})
	}
}

func TestOr(t *testing.T) {
	if _, ok := Or(nil).(Real); !ok {
		t.Fatalf("Or(nil) = %T, want Real", Or(nil))
	}
	m := NewManual(epoch)
	if Or(m) != Clock(m) {
		t.Fatal("Or(m) is not m")
	}
}

func TestReal(t *testing.T) {
	var c Clock = Real{}
	start := c.Now()
	c.Sleep(time.Millisecond)
	if c.Since(start) < time.Millisecond {
		t.Fatal("Real slept less than asked")
	}
	<-c.After(time.Millisecond)
	tk := c.NewTicker(time.Millisecond)
	<-tk.C()
	tk.Stop()
}
