use super::*;

const MI: i64 = 1024 * 1024;

#[test]
fn the_defragment_timeout_is_a_base_plus_seconds_per_gib_bounded() {
    let t = DefragTimeout::default();
    assert_eq!(t.for_size(0), Duration::from_secs(60));
    assert_eq!(t.for_size(512 * MI), Duration::from_secs(90));
    assert_eq!(t.for_size(4 * 1024 * MI), Duration::from_secs(300));
    // 8Gi (etcd's largest sensible quota) and beyond: at most ten minutes.
    assert_eq!(t.for_size(64 * 1024 * MI), MAX_DEFRAG_TIMEOUT);
    let short = DefragTimeout {
        base: Duration::from_millis(100),
        per_gib: Duration::from_secs(1),
    };
    assert_eq!(short.for_size(1024 * MI), Duration::from_millis(1100));
    // A base above the bound is taken as it is.
    let long = DefragTimeout {
        base: Duration::from_secs(900),
        per_gib: Duration::from_secs(60),
    };
    assert_eq!(long.for_size(1024 * MI), Duration::from_secs(900));
}
