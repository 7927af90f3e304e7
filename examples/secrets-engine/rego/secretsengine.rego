# The secrets-engine example policy in Rego, for comparing the pdp with OPA
# (make bench-compare). It decides exactly as policy/catalog.cedar with the
# pdp's registry checks before it, over data.registry — registry.json in
# OPA's shape, derived from the Cedar entities by the comparison itself.
# test/bench checks that the two agree on every request it sends.
package secretsengine

registry := data.registry

# The pdp's registry checks, in its order.
registry_reason := "tenant_unknown" if {
	not registry.tenants[input.tenant]
} else := "lane_unknown" if {
	not registry.lanes[input.lane]
} else := "lane_not_in_tenant" if {
	registry.lanes[input.lane] != input.tenant
} else := "subject_unknown" if {
	not registry.subjects[input.subject]
} else := "resource_unknown" if {
	not registry.resources[input.resource]
} else := "resource_not_in_lane" if {
	registry.resources[input.resource] != input.lane
} else := "stage_unknown" if {
	not input.stage in {"rotate", "read"}
}

catalog_rotate if {
	"catalog" in registry.subjects[input.subject]
	input.stage == "rotate"
	registry.resources[input.resource] == "catalog"
	input.system == "secrets-engine"
	input.tenant == "acme"
	input.lane == "catalog"
	every f in input.fields {
		f == "password"
	}
}

decision := {"allow": false, "reason": r} if {
	r := registry_reason
} else := {"allow": false, "reason": "private_key_fields_forbidden"} if {
	"private_key" in input.fields
} else := {"allow": true, "reason": "catalog_lane_policy_matched"} if {
	catalog_rotate
} else := {"allow": false, "reason": "no_policy_matched"}
