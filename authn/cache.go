package authn

import (
	"container/list"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sync/singleflight"
)

// CacheConfig configures [NewCache]. The zero value is usable.
type CacheConfig struct {
	// TTL is how long a successful verdict is reused. Default 2 minutes.
	// A verdict is never reused past the token's exp. It bounds how long a
	// revoked token (a deleted pod's) is still accepted. Negative: no
	// success is reused — every request is verified (the API server's
	// "0: bypass"); refusals, concurrency and MaxInFlight still apply.
	TTL time.Duration
	// NegativeTTL is how long a token_invalid verdict is reused, so that a
	// client repeating one bad token costs one verification per NegativeTTL
	// rather than one per request. Default 10 s — the kube-apiserver's own
	// token cache keeps failures as long; short, because a token refused
	// for not being valid yet may become valid. Negative: no negative
	// caching. Validator failures (unavailable, timeout, error) are never
	// cached: they say nothing about the token.
	NegativeTTL time.Duration
	// MaxInFlight bounds the verifications running at once (a flood of
	// distinct tokens); a lookup beyond it fails at once as
	// validator_unavailable, so that fail-open rules apply and the metric
	// tells. Cached verdicts are unaffected. Default 64.
	MaxInFlight int
	// MaxEntries bounds the cache. A full cache evicts the least recently
	// used verdict of the issuer holding the most (refusals count as one
	// issuer), so that under contention each active issuer keeps at least
	// MaxEntries / (active issuers). Default 10000.
	MaxEntries int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Defaults for [CacheConfig].
const (
	DefaultCacheTTL         = 2 * time.Minute
	DefaultCacheNegativeTTL = 10 * time.Second
	DefaultCacheMaxInFlight = 64
	DefaultCacheMaxEntries  = 10000
)

// ErrReverify is what a [Layer]'s Revoked returns for a cached verdict it
// can no longer vouch for: the cache verifies the token again instead of
// answering from memory.
var ErrReverify = errors.New("authn: the cached verdict can no longer be vouched for; verify the token again")

// Cache is an [Authenticator] that remembers successful verdicts of
// another, and token_invalid verdicts for a short while (NegativeTTL);
// validator failures are never cached. Concurrent misses for the same token
// share one lookup. Entries are keyed by HMAC-SHA-256 of the token under a
// key drawn at random per Cache, plus the required audiences; the token
// itself is never stored.
type Cache struct {
	inner    Layer
	ttl      time.Duration
	negTTL   time.Duration
	inFlight chan struct{}
	max      int
	now      func() time.Time
	// audPrefix is the length-prefixed required audiences, hashed before
	// the token.
	audPrefix []byte
	hmacs     sync.Pool

	mu      sync.Mutex
	entries map[[sha256.Size]byte]*list.Element
	lru     *list.List // front = most recent; values are *cacheEntry
	// groups are the entries of each issuer (refusals apart), each list
	// front = most recent: a full cache evicts from the largest.
	groups map[string]*list.List

	group singleflight.Group
	stats CacheStats
}

// CacheStats counts cache outcomes.
type CacheStats struct {
	Hits, Misses, Evictions uint64
	// NegativeHits are refusals answered from the cache; Shed are lookups
	// refused because MaxInFlight verifications were running. Reverified
	// are cached successes the inner layer's Revoked could no longer vouch
	// for, verified again (also counted as misses).
	NegativeHits, Shed, Reverified uint64
}

type cacheEntry struct {
	key      [sha256.Size]byte
	group    string        // the caller's issuer; refusals for a refusal
	groupLRU *list.List    // groups[group], held here so a hit looks up no map
	inGroup  *list.Element // its element in groupLRU
	caller   *Caller
	err      error     // a cached token_invalid verdict when caller is nil
	verified time.Time // when the verification that reached it began
	expires  time.Time
}

var _ Authenticator = (*Cache)(nil)

// NewCache wraps inner with a verdict cache, keyed on inner.Audiences,
// asking inner.Revoked on every hit. A plain authenticator is
// authn.Layer{Authenticator: a}.
func NewCache(inner Layer, cfg CacheConfig) *Cache {
	c := &Cache{inner: inner, ttl: cfg.TTL, negTTL: cfg.NegativeTTL, max: cfg.MaxEntries, now: cfg.Now,
		entries: map[[sha256.Size]byte]*list.Element{}, lru: list.New(), groups: map[string]*list.List{}}
	if c.ttl == 0 {
		c.ttl = DefaultCacheTTL
	}
	if c.negTTL == 0 {
		c.negTTL = DefaultCacheNegativeTTL
	}
	inFlight := cfg.MaxInFlight
	if inFlight <= 0 {
		inFlight = DefaultCacheMaxInFlight
	}
	c.inFlight = make(chan struct{}, inFlight)
	if c.max <= 0 {
		c.max = DefaultCacheMaxEntries
	}
	if c.now == nil {
		c.now = time.Now
	}
	auds := strings.Join(inner.Audiences, "\x00")
	// Length-prefixed, so that no audience list and token can collide with
	// another pair.
	c.audPrefix = binary.BigEndian.AppendUint64(nil, uint64(len(auds)))
	c.audPrefix = append(c.audPrefix, auds...)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic("authn: no randomness for the cache key: " + err.Error())
	}
	c.hmacs.New = func() any { return &keyHasher{h: hmac.New(sha256.New, key)} }
	return c
}

// Layer is the cache as a layer: its verdicts say whether they came from
// memory (Layer.Verify), and it answers for what it fronts — the audiences and
// the facts never stated. Revocation it handles itself.
func (c *Cache) Layer() Layer {
	return Layer{Authenticator: c, Audiences: c.inner.Audiences, Lacks: c.inner.Lacks, cache: c}
}

// keyHasher is a pooled HMAC and the buffer its sum is written into (a
// local array handed to the hash interface would escape: one allocation
// per lookup).
type keyHasher struct {
	h   hash.Hash
	buf [sha256.Size]byte
}

func (c *Cache) keyOf(token string) [sha256.Size]byte {
	kh := c.hmacs.Get().(*keyHasher)
	kh.h.Reset()
	kh.h.Write(c.audPrefix)
	// The hash reads the bytes and keeps nothing: no copy of the token.
	kh.h.Write(unsafe.Slice(unsafe.StringData(token), len(token))) //nolint:gosec // read-only view of the token for the hash; saves a copy per request.
	kh.h.Sum(kh.buf[:0])
	k := kh.buf
	c.hmacs.Put(kh)
	return k
}

// Authenticate returns a cached verdict for token, or asks the inner
// authenticator once however many goroutines ask at the same time.
func (c *Cache) Authenticate(ctx context.Context, token string) (*Caller, error) {
	caller, _, err := c.AuthenticateCached(ctx, token)
	return caller, err
}

// AuthenticateCached is Authenticate, and whether the verdict came from
// the cache.
func (c *Cache) AuthenticateCached(ctx context.Context, token string) (*Caller, bool, error) {
	key := c.keyOf(token)
	caller, verified, err := c.get(key)
	switch {
	case caller == nil && err == nil:
		return c.lookup(ctx, token, key)
	case caller != nil && c.inner.Revoked != nil:
		if err := c.inner.Revoked(caller, verified); errors.Is(err, ErrReverify) {
			c.reverify(key)
			return c.lookup(ctx, token, key)
		} else if err != nil {
			c.put(key, nil, err, verified)
			return nil, true, err
		}
	}
	return caller, true, err
}

// reverify drops a cached success its authenticator can no longer vouch
// for; the hit get counted becomes a miss.
func (c *Cache) reverify(key [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.remove(el)
	}
	c.stats.Hits--
	c.stats.Misses++
	c.stats.Reverified++
}

// lookup asks the inner authenticator on a miss, once however many ask at
// the same time. (Apart from AuthenticateCached so that the key the
// closure captures is this function's: a hit allocates nothing for it.)
func (c *Cache) lookup(ctx context.Context, token string, key [sha256.Size]byte) (*Caller, bool, error) {
	// The shared lookup must not die with the first caller's context; the
	// inner authenticator bounds its own time.
	ch := c.group.DoChan(string(key[:]), func() (any, error) {
		select {
		case c.inFlight <- struct{}{}:
			defer func() { <-c.inFlight }()
		default:
			c.mu.Lock()
			c.stats.Shed++
			c.mu.Unlock()
			return nil, Fail(ValidatorUnavailable, "%d verifications already in flight; refusing more until they finish", cap(c.inFlight))
		}
		began := c.now()
		caller, err := c.inner.Authenticator.Authenticate(context.WithoutCancel(ctx), token)
		switch {
		case err == nil && c.ttl > 0:
			c.put(key, caller, nil, began)
		case ReasonOf(err) == TokenInvalid && c.negTTL > 0 && Cacheable(err):
			c.put(key, nil, err, began)
		}
		return caller, err
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, false, r.Err
		}
		return r.Val.(*Caller), false, nil
	case <-ctx.Done():
		return nil, false, &Error{Reason: ValidatorTimeout, Err: ctx.Err()}
	}
}

// get returns the cached verdict for key and when the verification that
// reached it began; neither caller nor error: not cached.
func (c *Cache) get(key [sha256.Size]byte) (*Caller, time.Time, error) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		c.stats.Misses++
		return nil, time.Time{}, nil
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.expires) {
		c.remove(el)
		c.stats.Misses++
		return nil, time.Time{}, nil
	}
	c.lru.MoveToFront(el)
	e.groupLRU.MoveToFront(e.inGroup)
	if e.err != nil {
		c.stats.NegativeHits++
		return nil, e.verified, e.err
	}
	c.stats.Hits++
	return e.caller, e.verified, nil
}

func (c *Cache) put(key [sha256.Size]byte, caller *Caller, refusal error, verified time.Time) {
	var expires time.Time
	if refusal != nil {
		expires = c.now().Add(c.negTTL)
	} else {
		expires = c.now().Add(c.ttl)
		if !caller.Expiry.IsZero() && caller.Expiry.Before(expires) {
			expires = caller.Expiry
		}
	}
	group := refusals
	if caller != nil {
		group = caller.Issuer
	}
	e := &cacheEntry{key: key, group: group, caller: caller, err: refusal, verified: verified, expires: expires}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.remove(el)
	}
	g := c.groups[group]
	if g == nil {
		g = list.New()
		c.groups[group] = g
	}
	e.groupLRU, e.inGroup = g, g.PushFront(e)
	c.entries[key] = c.lru.PushFront(e)
	// Full: the least recently used verdict of the issuer holding the most
	// goes (refusals count as one issuer). One issuer may fill an idle
	// cache, but under contention each active issuer keeps at least
	// MaxEntries / (active issuers): an identity provider minting tokens
	// by the thousand, or a flood of refused ones, cannot evict another
	// tenant's verdicts below that.
	for c.lru.Len() > c.max {
		largest := g
		for _, og := range c.groups {
			if og.Len() > largest.Len() {
				largest = og
			}
		}
		c.remove(c.entries[largest.Back().Value.(*cacheEntry).key])
		c.stats.Evictions++
	}
}

// refusals is the group of cached refusals, whose issuer is not known.
const refusals = "\x00refusals"

// remove takes an entry out of the cache, its issuer's list included.
// The caller holds c.mu.
func (c *Cache) remove(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.entries, e.key)
	e.groupLRU.Remove(e.inGroup)
	if e.groupLRU.Len() == 0 {
		delete(c.groups, e.group)
	}
}

// Len returns the number of cached verdicts.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// InFlight returns the number of verifications running now.
func (c *Cache) InFlight() int { return len(c.inFlight) }

// Stats returns the counts so far.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}
