use super::*;

fn annotated<K: kube::Resource>(mut k: K, pairs: &[(&str, &str)]) -> K {
    k.meta_mut().annotations = Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    k
}

#[test]
fn a_pod_is_restarted_for_another_image_repository_only_when_both_record_one() {
    let key = labels::IMAGE_REPOSITORY_ANNOTATION;
    let blank = || crate::builders::tests::member("c-a", "c", "ns");
    let member = annotated(blank(), &[(key, "mirror.example/etcd")]);
    let old = annotated(Pod::default(), &[(key, "quay.io/coreos/etcd")]);
    assert_eq!(
        restart_for(&member, &old),
        Some("the new etcd image repository")
    );
    let same = annotated(Pod::default(), &[(key, "mirror.example/etcd")]);
    assert_eq!(restart_for(&member, &same), None);
    // A Pod without a record (an older operator's) and a member without one: no restart.
    assert_eq!(restart_for(&member, &annotated(Pod::default(), &[])), None);
    assert_eq!(restart_for(&annotated(blank(), &[]), &old), None);
}
