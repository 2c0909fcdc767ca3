"""Policy: approvals, saved rules and the hardline floor."""

# The approval policies (config.APPROVAL_STRICTNESS orders them from loosest to strictest).
POLICIES = ("on-request", "on-failure", "unless-trusted", "deny-untrusted", "never")
