package service

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestDeleteManyWithOneBlocked: a delete of several indices of which one
// refuses it (a metadata block) deletes none, as OpenSearch checks the
// blocks of every index before it deletes (not those sorted first).
func TestDeleteManyWithOneBlocked(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	for _, n := range []string{"a1", "a2", "a3"} {
		if _, err := s.CreateIndex(CreateRequest{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSettings("a2", FlatSettings{SettingBlockMetadata: str("true")}, IndicesOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteIndex("a*", IndicesOptions{}); errType(err) != TypeClusterBlock {
		t.Fatalf("got %v, want %s", err, TypeClusterBlock)
	}
	if got := s.Names(); len(got) != 3 {
		t.Fatalf("indices left after a refused delete: %v", got)
	}
}

// TestMetadataReadersRaceADelete: PUT _settings and GET _alias resolve
// an expression to names and then read the metadata of those names under a
// second lock acquisition; an index deleted in between must make them answer
// (index_not_found, or without that index), not dereference the metadata the
// delete removed.
func TestMetadataReadersRaceADelete(t *testing.T) {
	for _, op := range []struct {
		name string
		do   func(s *Service) error
	}{
		{"put settings", func(s *Service) error {
			return s.PutSettings("r", FlatSettings{SettingReplicas: str("0")}, IndicesOptions{})
		}},
		{"get aliases", func(s *Service) error {
			_, err := s.Aliases("r", nil, IndicesOptions{})
			return err
		}},
	} {
		t.Run(op.name, func(t *testing.T) {
			s := openT(t, t.TempDir())
			defer s.Close()
			var panics atomic.Int64
			var first atomic.Value
			call := func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						if panics.Add(1) == 1 {
							first.Store(fmt.Sprint(r))
						}
						err = nil
					}
				}()
				return op.do(s)
			}
			for round := 0; round < 200 && panics.Load() == 0; round++ {
				if _, err := s.CreateIndex(CreateRequest{Name: "r", Settings: FlatSettings{SettingReplicas: str("0")}}); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				var stop atomic.Bool
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < 2000 && !stop.Load(); i++ {
							if err := call(); err != nil {
								if typ := errType(err); typ != TypeIndexNotFound {
									t.Errorf("%s: %v", op.name, err)
								}
								return
							}
						}
					}()
				}
				if err := s.DeleteIndex("r", IndicesOptions{}); err != nil {
					t.Error(err)
				}
				stop.Store(true)
				wg.Wait()
			}
			if n := panics.Load(); n > 0 {
				t.Fatalf("%s racing a delete panicked %d times: %v", op.name, n, first.Load())
			}
		})
	}
}
