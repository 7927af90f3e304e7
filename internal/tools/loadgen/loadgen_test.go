package loadgen_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/tools/loadgen"
)

func TestRunCountsAnswersAndErrors(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer x" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if served.Add(1)%10 == 0 {
			_, _ = w.Write([]byte("bad"))
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	res, err := loadgen.Run(context.Background(), loadgen.Config{URL: srv.URL, Body: []byte("{}"), Header: http.Header{"Authorization": {"Bearer x"}},
		Connections: 2, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond,
		Check: func(status int, body []byte) error {
			if status != 200 || string(body) != "ok" {
				return errors.New("not ok")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors == 0 || res.FirstError == nil || res.P50 <= 0 || res.P99 < res.P50 {
		t.Fatalf("%+v", res)
	}
	// About one answer in ten is bad; warm-up answers are not counted.
	if total := res.Requests + res.Errors; res.Errors*20 < total || res.Errors*5 > total || int64(total) > served.Load() {
		t.Fatalf("%d answered, %d errors of %d served", res.Requests, res.Errors, served.Load())
	}
}

func TestRunRefusesNoURL(t *testing.T) {
	if _, err := loadgen.Run(context.Background(), loadgen.Config{}); err == nil {
		t.Fatal("no URL accepted")
	}
}
