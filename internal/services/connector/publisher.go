package connector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/credentials"
)

// Publisher sends health events to a connector with the one client
// credentials implementation: TLS where the target is TCP, the token file
// re-read on every call, and an expired token refused before it is sent.
type Publisher struct {
	conn   *grpc.ClientConn
	client pcv1.PlatformConnectorClient
	// Backoff is the first wait before a retry; it doubles up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
}

// NewPublisher validates cfg and dials cfg.Address.
func NewPublisher(cfg credentials.Config) (*Publisher, error) {
	if cfg.Address == "" {
		return nil, errors.New("connector: the publisher needs an address (unix:///path/to.sock or host:port)")
	}
	conn, err := cfg.Dial()
	if err != nil {
		return nil, fmt.Errorf("connector: %w", err)
	}
	return &Publisher{conn: conn, client: pcv1.NewPlatformConnectorClient(conn), Backoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second}, nil
}

// Close closes the connection.
func (p *Publisher) Close() error { return p.conn.Close() }

// Publish sends one batch once, under a new idempotency key.
func (p *Publisher) Publish(ctx context.Context, events ...*pcv1.HealthEvent) error {
	return p.PublishKeyed(ctx, NewIdempotencyKey(), events...)
}

// PublishKeyed sends one batch once under the idempotency key given: a
// caller that retries on its own sends the same key each time.
func (p *Publisher) PublishKeyed(ctx context.Context, key string, events ...*pcv1.HealthEvent) error {
	_, err := p.client.HealthEventOccurredV1(ctx, &pcv1.HealthEvents{Version: 1, Events: events, IdempotencyKey: key})
	return err
}

// NewIdempotencyKey is a fresh batch key: a random UUID.
func NewIdempotencyKey() string { return uuid.NewString() }

// PublishRetrying sends one batch, retrying while the connector answers
// Unavailable (its validator or its datastore is down, or the connection
// broke) until ctx ends. A refusal with any other code is returned at
// once: retrying cannot change it. Every attempt carries the same
// idempotency key, so a batch the connector stored before the connection
// broke (its answer lost) is not stored again by the retry.
func (p *Publisher) PublishRetrying(ctx context.Context, events ...*pcv1.HealthEvent) error {
	key := NewIdempotencyKey()
	wait := p.Backoff
	for {
		err := p.PublishKeyed(ctx, key, events...)
		if status.Code(err) != codes.Unavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connector: gave up retrying: %w", err)
		case <-time.After(wait):
		}
		wait = min(wait*2, p.MaxBackoff)
	}
}
