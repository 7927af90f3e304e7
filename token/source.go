package token

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
)

// Source supplies the bearer token for one outgoing call.
//
// Token is called once per call (per RPC, per HTTP request), so it must be
// cheap and safe for concurrent use by many goroutines. It returns a token
// without the "Bearer " prefix, or an error that says why there is none.
type Source interface {
	Token(ctx context.Context) (string, error)
}

// SourceFunc adapts a function to the [Source] interface.
type SourceFunc func(ctx context.Context) (string, error)

// Token calls f(ctx).
func (f SourceFunc) Token(ctx context.Context) (string, error) { return f(ctx) }

// ErrEmpty is returned (wrapped) when a source holds no token.
var ErrEmpty = errors.New("token: empty")

var (
	_ Source = (*FileSource)(nil)
	_ Source = StaticSource("")
	_ Source = SourceFunc(nil)
)

// FileSource reads the token from a file on every call. Create one with [File].
type FileSource struct {
	path string
}

// File returns a source that reads the token from path on every call.
//
// Reading on every call is the refresh mechanism: an atomic rename or a
// kubelet ..data symlink swap is seen on the next call. Leading and trailing
// white space (a trailing newline written by echo or a text editor) is
// removed. A missing, unreadable or empty file is an error naming the path;
// the error never contains the file's contents.
func File(path string) *FileSource { return &FileSource{path: path} }

// Path returns the file the source reads.
func (s *FileSource) Path() string { return s.path }

// String describes the source for error messages: file "<path>".
func (s *FileSource) String() string { return fmt.Sprintf("file %q", s.path) }

// Token reads and returns the token in the file.
func (s *FileSource) Token(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		// *PathError already names the path.
		return "", fmt.Errorf("token: reading token file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "", fmt.Errorf("%w: token file %q holds no token", ErrEmpty, s.path)
	}
	return string(b), nil
}

// StaticSource is a fixed token. Create one with [Static].
type StaticSource string

// Static returns a source that always returns tok. It is meant for tests and
// for inline configuration; a real deployment should prefer [File] so that
// the token can be renewed without a restart.
func Static(tok string) StaticSource { return StaticSource(tok) }

// String describes the source for error messages without revealing the token.
func (s StaticSource) String() string { return "inline token" }

// Token returns the fixed token, or an error if it is empty.
func (s StaticSource) Token(context.Context) (string, error) {
	if s == "" {
		return "", fmt.Errorf("%w: inline token is empty", ErrEmpty)
	}
	return string(s), nil
}

// describe names a source for error messages. Sources that implement
// fmt.Stringer describe themselves; others are named by their type.
func describe(s Source) string {
	if d, ok := s.(fmt.Stringer); ok {
		return d.String()
	}
	return fmt.Sprintf("%T", s)
}
