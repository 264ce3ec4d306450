//! kvroute harness (in progress).
