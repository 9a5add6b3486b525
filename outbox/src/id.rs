//! Job ids: a UUIDv7's 128 bits written as a ULID, 26 characters of Crockford's base32.
//!
//! The bits are time-ordered (milliseconds first, then a counter and random bits), and the alphabet is in ASCII
//! order, so the ids sort as text in the order they were made, as the ready index and the worker's cursor read
//! them. Written this way, an id is 26 bytes rather than a UUID's 36: every job row, its primary key entries, its
//! ready index entry and the feed rows that list it are that much shorter (`outbox-bench --case process` reports
//! the WAL bytes a job writes). Ids made before this form (UUIDs) stay valid: an id is any text.

/// Crockford's base32 alphabet, in ASCII order.
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Characters in an id this build makes (jobs enqueued before ULIDs have 36-character UUIDs).
const JOB_ID_LEN: usize = 26;

/// A new job id: time-ordered, unique, 26 characters of `0-9` and `A-Z` (no `I`, `L`, `O` or `U`).
pub fn new_job_id() -> String {
    encode(uuid::Uuid::now_v7().as_u128())
}

/// `bits` as 26 base32 digits, most significant first (the first digit holds the top 3 bits).
fn encode(bits: u128) -> String {
    let mut id = String::with_capacity(JOB_ID_LEN);
    for i in (0..JOB_ID_LEN).rev() {
        id.push(char::from(ALPHABET[((bits >> (5 * i)) & 31) as usize]));
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_26_characters_of_crockford_base32_in_the_order_they_were_made() {
        let ids: Vec<String> = (0..10_000).map(|_| new_job_id()).collect();
        for id in &ids {
            assert_eq!(id.len(), JOB_ID_LEN, "{id}");
            assert!(id.bytes().all(|c| ALPHABET.contains(&c)), "{id}");
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids are made in increasing order");
    }

    #[test]
    fn encoding_keeps_the_order_of_the_bits() {
        assert_eq!(encode(0), "0".repeat(26));
        assert_eq!(encode(u128::MAX), format!("7{}", "Z".repeat(25)));
        assert_eq!(encode(31), format!("{}Z", "0".repeat(25)));
        let mut values = [0u128, 1, 31, 32, 1 << 64, (1 << 64) + 1, u128::MAX >> 1, u128::MAX];
        values.sort_unstable();
        let encoded: Vec<String> = values.iter().map(|&v| encode(v)).collect();
        assert!(encoded.windows(2).all(|w| w[0] < w[1]), "{encoded:?}");
    }
}
