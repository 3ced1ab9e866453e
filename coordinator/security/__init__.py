"""Security profiles' machinery: signatures, identity verifiers, transparency (the [crypto] extra)."""
