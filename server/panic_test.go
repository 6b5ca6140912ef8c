package server

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A handler's panic answers OpenSearch's 500 and is logged with its stack;
// one after the response began aborts the connection instead of letting a
// truncated body pass for a whole one. (Without the recover, the panic
// left ServeHTTP: net/http's own recover drops the connection, and the
// client sees no OpenSearch error.)
func TestAPanicAnswersA500OrAbortsABegunResponse(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	s := New(Config{Logger: zap.New(core)})
	s.handle(s.sys, "GET /_test/panic", func(http.ResponseWriter, *http.Request) error { panic("boom") })
	s.handle(s.sys, "GET /_test/panic-late", func(w http.ResponseWriter, _ *http.Request) error {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"partial":`))
		panic("boom after the header")
	})

	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/_test/panic", nil))
	if want := `{"error":{"reason":"panic: boom","root_cause":[{"reason":"panic: boom","type":"exception"}],"type":"exception"},"status":500}`; rec.Code != 500 || rec.Body.String() != want {
		t.Errorf("a panic answered %d %s, want 500 %s", rec.Code, rec.Body, want)
	}
	if got := logs.FilterMessage("request panicked").All(); len(got) != 1 || got[0].ContextMap()["stack"] == nil {
		t.Errorf("logged %v, want one \"request panicked\" entry with a stack", got)
	}

	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("a panic after the response began: ServeHTTP panicked with %v, want http.ErrAbortHandler", p)
			}
		}()
		s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/_test/panic-late", nil))
	}()
	if got := logs.FilterMessage("request panicked").Len(); got != 2 {
		t.Errorf("%d panics logged, want 2", got)
	}
}
