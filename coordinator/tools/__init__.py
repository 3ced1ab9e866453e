"""Working with stores and logs outside a call: replay and verification."""
