"""Cost as data: token and GPU prices, the cost ledger and budgets."""
