//! What the router knows of the workers' caches and how far a request may reuse them:
//! the cache index ([`index`]), the reuse walk over it ([`reuse`]), and the count of
//! entry operations both perform ([`work`], SPEC.md §1.5).

pub(crate) mod index;
pub(crate) mod reuse;
pub(crate) mod work;
