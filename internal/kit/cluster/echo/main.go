// Command echo is a plain HTTP upstream for the test cluster's pods (an
// application a callerauth-proxy sidecar fronts): it listens on --listen
// and answers every request 200 with a JSON object of its method, path and
// the identity headers it was sent. internal/kit/cluster builds it into an
// image (EchoImage).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "path": r.URL.Path,
			"user": r.Header.Get("X-Remote-User"), "groups": r.Header.Values("X-Remote-Group"),
		})
	})
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
