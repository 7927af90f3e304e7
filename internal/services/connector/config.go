// Package connector is the platform-connector (docs/platform-connector.md): a gRPC service
// that stores health events about nodes, with node-binding authentication,
// in two roles — socket (node-local DaemonSet) and deployment.
package connector

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/callerauth/callerauth/binding"
	"github.com/callerauth/callerauth/guard"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// AuthConfig is the node-binding part of config.json, the ConfigMap the
// chart writes.
type AuthConfig struct {
	// EnableNodeBindingAuth is required: there is no default.
	EnableNodeBindingAuth bool
	// Audience every publisher's token is minted for.
	Audience string
	// CrossNodeServiceAccounts may report on nodes other than their own.
	CrossNodeServiceAccounts []string
	// Mode is enforce (default) or audit.
	Mode guard.Mode
	// FailOpenOnUnavailable, default false.
	FailOpenOnUnavailable bool
}

// Keys of config.json.
const (
	KeyEnable   = "enableNodeBindingAuth"
	KeyAudience = "AuthAudience"
	KeyCross    = "AuthCrossNodeServiceAccounts"
	KeyMode     = "AuthMode"
	KeyFailOpen = "AuthFailOpenOnUnavailable"
)

var knownKeys = []string{KeyEnable, KeyAudience, KeyCross, KeyMode, KeyFailOpen}

// LoadAuthConfig reads config.json.
func LoadAuthConfig(path string) (AuthConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return AuthConfig{}, fmt.Errorf("connector: %w", err)
	}
	cfg, err := ParseAuthConfig(b)
	if err != nil {
		return AuthConfig{}, fmt.Errorf("%w (in %s)", err, path)
	}
	return cfg, nil
}

// ParseAuthConfig reads the node-binding keys strictly: enableNodeBindingAuth
// must be present and a real boolean; when it is true, AuthAudience must be a
// non-empty string and AuthCrossNodeServiceAccounts an explicit list ([] for
// none, null refused) of canonical service-account usernames; AuthMode is
// enforce or audit; AuthFailOpenOnUnavailable a real boolean. Unknown keys
// and keys written twice (RFC 7493 I-JSON) are refused. Every refusal names the key and the offending value; all of
// them are reported at once.
func ParseAuthConfig(b []byte) (AuthConfig, error) {
	raw := map[string][]byte{}
	var errs []error
	err := ijson.Members(b, func(name, value []byte) error {
		k := string(name)
		if !slices.Contains(knownKeys, k) {
			errs = append(errs, fmt.Errorf("connector: config.json: unknown key %q (known: %s)", k, strings.Join(knownKeys, ", ")))
		}
		raw[k] = value
		return nil
	})
	if err != nil {
		var e *ijson.Error
		switch {
		case errors.As(err, &e) && e.Member() != "":
			return AuthConfig{}, fmt.Errorf("connector: config.json: key %q: %s; write each key once", e.Member(), e.Problem)
		case isNull(b):
			return AuthConfig{}, errors.New("connector: config.json is null; want a JSON object")
		}
		return AuthConfig{}, fmt.Errorf("connector: config.json is not a JSON object: %w", err)
	}
	cfg := AuthConfig{Mode: guard.Enforce}
	enable, ok := raw[KeyEnable]
	if !ok {
		errs = append(errs, fmt.Errorf("connector: config.json: %s is required and has no default; set it to true or false", KeyEnable))
	} else if err := realBool(KeyEnable, enable, &cfg.EnableNodeBindingAuth); err != nil {
		errs = append(errs, err)
	}
	if v, ok := raw[KeyFailOpen]; ok {
		if err := realBool(KeyFailOpen, v, &cfg.FailOpenOnUnavailable); err != nil {
			errs = append(errs, err)
		}
	}
	if v, ok := raw[KeyMode]; ok {
		s, isString := ijson.String(v)
		var err error
		if cfg.Mode, err = guard.ParseMode(s); !isString || err != nil {
			errs = append(errs, fmt.Errorf("connector: config.json: %s is %s; want \"enforce\" or \"audit\"", KeyMode, v))
		}
	}
	if v, ok := raw[KeyAudience]; ok {
		var isString bool
		if cfg.Audience, isString = ijson.String(v); !isString {
			errs = append(errs, fmt.Errorf("connector: config.json: %s is %s; want a string", KeyAudience, v))
		}
	}
	cross, crossSet := raw[KeyCross]
	if crossSet {
		if isNull(cross) {
			errs = append(errs, fmt.Errorf("connector: config.json: %s is null; null and \"none\" are not the same statement: write [] for none", KeyCross))
		} else if list, ok := ijson.Strings(cross); !ok {
			errs = append(errs, fmt.Errorf("connector: config.json: %s is %s; want a list of strings", KeyCross, cross))
		} else {
			cfg.CrossNodeServiceAccounts = list
			for i, u := range list {
				if err := binding.ValidateServiceAccountUsername(u); err != nil {
					errs = append(errs, fmt.Errorf("connector: config.json: %s[%d] %q: %w", KeyCross, i, u, err))
				}
			}
		}
	}
	if cfg.EnableNodeBindingAuth {
		if cfg.Audience == "" {
			errs = append(errs, fmt.Errorf("connector: config.json: %s is required (a non-empty string) when %s is true", KeyAudience, KeyEnable))
		}
		if !crossSet {
			errs = append(errs, fmt.Errorf("connector: config.json: %s is required as an explicit list when %s is true ([] means none)", KeyCross, KeyEnable))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return AuthConfig{}, err
	}
	return cfg, nil
}

// realBool accepts only the JSON literals true and false: a quoted "false",
// null and 0 are refused rather than guessed at.
func realBool(key string, v []byte, dst *bool) error {
	switch string(bytes.TrimSpace(v)) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		return fmt.Errorf("connector: config.json: %s is %s; want a real boolean, true or false (a quoted string, null or 0 is refused)", key, v)
	}
	return nil
}

func isNull(v []byte) bool { return string(bytes.TrimSpace(v)) == "null" }
