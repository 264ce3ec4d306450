//! When a published cache event reaches the router (SPEC.md §11, *Publication*): the
//! completion tick plus the publication lag plus a seeded jitter; and whether it
//! reaches the router at all (*Loss*).

use crate::mutant::{active, Mutant};
use crate::simulate::options::SimulateOptions;
use sha2::{Digest, Sha256};

/// The tick a cache event published at `completion_tick` is delivered at.
pub fn delivery_tick(
    options: &SimulateOptions,
    completion_tick: u64,
    worker: u32,
    epoch: u64,
) -> u64 {
    // The mutant delivers at the completion itself plus jitter, as if the bus were free.
    let lag_ticks = if active(Mutant::PublicationLagDropped) {
        0
    } else {
        options.publication_lag_ticks
    };
    completion_tick
        .saturating_add(lag_ticks)
        .saturating_add(jitter(options, worker, epoch))
}

/// Whether the bus loses the event `epoch` of `worker`: the first 8 bytes of
/// `SHA-256("loss/<seed>/<worker>/<epoch>")`, big-endian, modulo 1000, below the loss
/// per mille. A pure function of the event, like the jitter, so no draw order exists.
pub fn is_lost(options: &SimulateOptions, worker: u32, epoch: u64) -> bool {
    if options.loss_per_mille == 0 {
        return false;
    }
    let text = format!("loss/{}/{worker}/{epoch}", options.jitter_seed);
    head_u64(&Sha256::digest(text.as_bytes())) % 1000 < options.loss_per_mille
}

fn head_u64(digest: &[u8]) -> u64 {
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(head)
}

/// Extra publication ticks for one event: a pure function of the seed, the worker and
/// the epoch, so it does not depend on the order events are generated in.
fn jitter(options: &SimulateOptions, worker: u32, epoch: u64) -> u64 {
    if options.jitter_ticks == 0 {
        return 0;
    }
    let digest = Sha256::digest(format!("{}/{worker}/{epoch}", options.jitter_seed).as_bytes());
    let value = head_u64(&digest);
    // SPEC.md §11: modulo J + 1; for J = 2^64 - 1 that is 2^64, which leaves the value
    // as it is (the command line bounds J by B, a library caller need not).
    match options.jitter_ticks.checked_add(1) {
        Some(modulus) => value % modulus,
        None => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_is_the_specd_function_of_seed_worker_and_epoch() {
        let mut options = SimulateOptions::default();
        assert_eq!(jitter(&options, 3, 5), 0);
        options.jitter_ticks = 40;
        options.jitter_seed = 7;
        // SPEC.md §11: the first 8 bytes of SHA-256("7/3/5"), big-endian, modulo 41.
        let digest = Sha256::digest(b"7/3/5");
        let head = u64::from_be_bytes(digest[..8].try_into().unwrap());
        assert_eq!(jitter(&options, 3, 5), head % 41);
        let spread: std::collections::BTreeSet<u64> =
            (0..200).map(|epoch| jitter(&options, 0, epoch)).collect();
        assert!(spread.iter().all(|&j| j <= 40) && spread.len() > 30);
    }

    #[test]
    fn loss_is_the_specd_function_of_seed_worker_and_epoch() {
        let mut options = SimulateOptions::default();
        assert!(!(0..100).any(|e| is_lost(&options, 0, e)));
        options.jitter_seed = 7;
        options.loss_per_mille = 250;
        let digest = Sha256::digest(b"loss/7/3/5");
        let head = u64::from_be_bytes(digest[..8].try_into().unwrap());
        assert_eq!(is_lost(&options, 3, 5), head % 1000 < 250);
        let lost = (0..4000).filter(|&e| is_lost(&options, 1, e)).count();
        assert!(
            (900..1100).contains(&lost),
            "{lost} of 4000 lost at 250 per mille"
        );
        options.loss_per_mille = 1000;
        assert!((0..100).all(|e| is_lost(&options, 2, e)));
    }

    /// The boundary of the draw, which no other test meets, so `<=` for `<` fails here: an
    /// event whose draw is exactly `P` is kept, and lost once the rate is `P + 1`.
    #[test]
    fn an_event_whose_draw_equals_the_rate_is_kept() {
        let draw = |epoch: u64| {
            let digest = Sha256::digest(format!("loss/7/3/{epoch}").as_bytes());
            u64::from_be_bytes(digest[..8].try_into().unwrap()) % 1000
        };
        let mut options = SimulateOptions {
            jitter_seed: 7,
            ..SimulateOptions::default()
        };
        let mut met = 0;
        for epoch in 0..20_000 {
            let rate = draw(epoch);
            if rate == 0 {
                continue;
            }
            options.loss_per_mille = rate;
            assert!(!is_lost(&options, 3, epoch), "draw {rate} at rate {rate}");
            options.loss_per_mille = rate + 1;
            assert!(
                is_lost(&options, 3, epoch),
                "draw {rate} at rate {}",
                rate + 1
            );
            met += 1;
        }
        assert!(met > 19_000, "{met} epochs checked at their own draw");
    }

    #[test]
    fn the_largest_jitter_does_not_overflow() {
        let options = SimulateOptions {
            jitter_ticks: u64::MAX,
            ..SimulateOptions::default()
        };
        let head = u64::from_be_bytes(Sha256::digest(b"0/1/2")[..8].try_into().unwrap());
        assert_eq!(jitter(&options, 1, 2), head);
        assert_eq!(delivery_tick(&options, u64::MAX - 3, 1, 2), u64::MAX);
    }
}
