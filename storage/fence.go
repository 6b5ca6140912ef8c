package storage

import (
	"fmt"
	"time"
)

// LogHolds returns how many splits hold the shard's operation log (0: no
// write is logged). Simulations and tests check that no hold outlives the
// split that took it.
func (s *Shard) LogHolds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logHold
}

// Fence takes the shard's apply lock and keeps it until Unfence: no write
// is applied meanwhile, and every write applied before is visible. It waits
// at most wait for writes in flight to drain (polling), then gives up with
// ErrLockTimeout holding nothing. A handoff fences its parent in one step
// and unfences it in a later one, so that a simulator can stop between.
// The wait and the polling run on the engine's clock: on a manual clock
// each poll waits for the clock to move.
func (s *Shard) Fence(wait time.Duration) error {
	deadline := s.clock.Now().Add(wait)
	for !s.mu.TryLock() {
		if s.clock.Now().After(deadline) {
			return fmt.Errorf("storage: shard %d: drain of in-flight writes exceeded %v: %w", s.id, wait, ErrLockTimeout)
		}
		s.clock.Sleep(20 * time.Microsecond)
	}
	if s.closed.Load() {
		s.mu.Unlock()
		return ErrShardClosed
	}
	return nil
}

// Unfence releases the apply lock Fence took.
func (s *Shard) Unfence() { s.mu.Unlock() }
