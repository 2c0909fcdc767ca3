"""Policy: approvals, saved rules and the hardline floor."""
