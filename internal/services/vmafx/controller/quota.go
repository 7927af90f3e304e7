package controller

import (
	"fmt"
	"strconv"
	"strings"
)

// Default quotas of one tenant.
const (
	// DefaultMaxPendingJobs bounds a tenant's PENDING jobs
	// (--max-pending-jobs).
	DefaultMaxPendingJobs = 1000
	// DefaultMaxSubmissionsPerMinute bounds a tenant's submissions per
	// minute and controller replica (--max-submissions-per-minute).
	DefaultMaxSubmissionsPerMinute = 600
	// maxQuota bounds what a quota may be set to.
	maxQuota = 1_000_000
)

// Quota is what one tenant may put in the datastore every tenant shares.
type Quota struct {
	// Pending bounds the tenant's PENDING jobs.
	Pending int
	// PerMinute bounds its submissions in a minute (per replica).
	PerMinute int
}

// quotas are the defaults and each tenant's overrides
// (--tenant-quota NAME=PENDING/PER_MINUTE).
type quotas struct {
	def       Quota
	overrides map[string]Quota
}

// parseQuotas reads the defaults and the --tenant-quota overrides, naming
// what is wrong.
func parseQuotas(def Quota, overrides []string) (quotas, error) {
	q := quotas{def: def, overrides: map[string]Quota{}}
	if def.Pending < 1 || def.Pending > maxQuota {
		return q, fmt.Errorf("--max-pending-jobs %d: want 1 to %d", def.Pending, maxQuota)
	}
	if def.PerMinute < 1 || def.PerMinute > maxQuota {
		return q, fmt.Errorf("--max-submissions-per-minute %d: want 1 to %d", def.PerMinute, maxQuota)
	}
	for _, o := range overrides {
		name, v, ok := strings.Cut(o, "=")
		p, m, ok2 := strings.Cut(v, "/")
		pending, err1 := strconv.Atoi(p)
		perMinute, err2 := strconv.Atoi(m)
		switch {
		case !ok || !ok2 || name == "" || err1 != nil || err2 != nil:
			return q, fmt.Errorf("--tenant-quota %q: want TENANT=PENDING/PER_MINUTE, e.g. tenant-a=5000/1200", o)
		case pending < 1 || pending > maxQuota || perMinute < 1 || perMinute > maxQuota:
			return q, fmt.Errorf("--tenant-quota %q: each number from 1 to %d", o, maxQuota)
		}
		if _, dup := q.overrides[name]; dup {
			return q, fmt.Errorf("--tenant-quota: tenant %q twice", name)
		}
		q.overrides[name] = Quota{Pending: pending, PerMinute: perMinute}
	}
	return q, nil
}

// of is tenant's quota.
func (q quotas) of(tenant string) Quota {
	if o, ok := q.overrides[tenant]; ok {
		return o
	}
	return q.def
}
