# The catalog rule of policy/catalog.cedar as an OPA user would write the
# minimal policy for it: the lane's members and resources inline, no
# registry converted from the Cedar entities and none of the pdp's registry
# checks. The lighter of make bench-compare's two OPA peers (the other,
# secretsengine.rego, decides exactly as the pdp does); only the allow
# request is sent to it, and its answer checked.
package secretsengine.minimal

catalog_subjects := {"svc-rotator"}

catalog_resources := {"db-password", "tls-key"}

default decision := {"allow": false, "reason": "no_policy_matched"}

decision := {"allow": false, "reason": "private_key_fields_forbidden"} if "private_key" in input.fields

decision := {"allow": true, "reason": "catalog_lane_policy_matched"} if {
	not "private_key" in input.fields
	input.subject in catalog_subjects
	input.resource in catalog_resources
	input.stage == "rotate"
	input.system == "secrets-engine"
	input.tenant == "acme"
	input.lane == "catalog"
	every f in input.fields {
		f == "password"
	}
}
