//! Placeholder: the oracle is being written from SPEC.md by a separate session.
