"""Context assembly machinery: budgets, layer candidates and fitting under a hard token budget."""
