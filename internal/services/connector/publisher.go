package connector

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// Publish sends one batch once.
func (p *Publisher) Publish(ctx context.Context, events ...*pcv1.HealthEvent) error {
	_, err := p.client.HealthEventOccurredV1(ctx, &pcv1.HealthEvents{Version: 1, Events: events})
	return err
}

// PublishRetrying sends one batch, retrying while the connector answers
// Unavailable (its validator is down, or its datastore) until ctx ends. A
// refusal with any other code is returned at once: retrying cannot change
// it. An Unavailable answer means the batch was not stored, so a retry does
// not duplicate it.
func (p *Publisher) PublishRetrying(ctx context.Context, events ...*pcv1.HealthEvent) error {
	wait := p.Backoff
	for {
		err := p.Publish(ctx, events...)
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
