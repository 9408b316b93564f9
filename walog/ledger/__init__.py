"""The BookKeeper ledger protocol, client side."""
