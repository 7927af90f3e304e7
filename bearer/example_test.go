package bearer_test

import (
	"fmt"
	"net/http"

	"github.com/callerauth/callerauth/bearer"
)

// Reading the credential off an HTTP request: absent, a token, or
// malformed — a malformed one says why without quoting it.
func ExampleFromHeader() {
	for _, v := range []string{"", "Bearer eyJhbGciOi.x.y", "Basic dXNlcjpwYXNz"} {
		h := http.Header{}
		if v != "" {
			h.Set("Authorization", v)
		}
		c := bearer.FromHeader(h)
		switch c.Kind {
		case bearer.Token:
			fmt.Println(c.Kind, c.Token)
		case bearer.Malformed:
			fmt.Println(c.Kind, "—", c.Problem)
		default:
			fmt.Println(c.Kind)
		}
	}
	// Output:
	// absent
	// token eyJhbGciOi.x.y
	// malformed — the Authorization scheme is Basic, not Bearer
}
