package routing

import "fmt"

// Bump returns t with the next version and nothing else changed. Recovery
// uses it so that no version number is ever reused: a table published in
// memory but never made durable (the commit of a handoff a crash cut short)
// may have reached routers, and the table recovery writes instead must be
// newer than it, or a router that learned it would never adopt the
// replacement (it adopts strictly newer versions only).
func Bump(t *Table) (*Table, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("routing: bump invalid table: %w", err)
	}
	n := t.clone()
	if n.version <= t.version {
		return nil, fmt.Errorf("routing: bump of table v%d: version space exhausted", t.version)
	}
	return n, nil
}
