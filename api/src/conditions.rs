//! Condition types and reasons. The strings are part of the wire contract (scripts and runbooks
//! match on them); never rename one.

/// EtcdCluster condition types.
pub mod cluster {
    pub const AVAILABLE: &str = "Available";
    pub const PROGRESSING: &str = "Progressing";
    pub const DEGRADED: &str = "Degraded";
    /// Not in the reference API: whether every member's PVC holds `spec.storage.size` after it
    /// grew (appears with the first growth, then stays).
    pub const VOLUMES_EXPANDED: &str = "VolumesExpanded";
    /// Not in the reference API: the NOSPACE and CORRUPT alarms etcd has raised, by member
    /// (appears with the first alarm, then stays).
    pub const ALARM: &str = "Alarm";
}

/// EtcdMember condition types.
pub mod member {
    pub const READY: &str = "Ready";
    pub const VERSION_DRIFTED: &str = "VersionDrifted";
    /// Not in the reference API: whether the member's PVC holds `spec.storage.size` after it grew
    /// (appears with the first growth, then stays).
    pub const VOLUME_EXPANDED: &str = "VolumeExpanded";
}

/// EtcdSnapshot condition types.
pub mod snapshot {
    pub const READY: &str = "Ready";
    /// Not in the reference API: whether the stored snapshot was read back, its sha256 checked,
    /// restored into scratch space and its `hashkv` compared with what the cluster reported
    /// (docs/snapshots.md, "Verification"). Unknown while the verification Job runs; absent
    /// when the snapshot asked for none (`spec.verify: false`) or completed before the operator
    /// verified snapshots.
    pub const VERIFIED: &str = "Verified";
}

/// EtcdSnapshotSchedule condition types.
pub mod schedule {
    /// The schedule parses and is being followed.
    pub const READY: &str = "Ready";
}

/// EtcdDefrag condition types.
pub mod defrag {
    /// True once Complete; its reason says what the run waits for or did.
    pub const READY: &str = "Ready";
    /// The reference's (v0.5.5): whether the run's admission checks let it go. False with
    /// `Queued` (another run of the cluster goes first) or `ClusterNotHealthy`; True with
    /// `Running` once admitted. Kept as the run last saw it after the run ends.
    pub const DEFRAG_CHECKED: &str = "DefragChecked";
}

/// EtcdRecovery condition types (ours, beyond the reference API).
pub mod recovery {
    /// True once Complete; its reason says what the recovery waits for, does or did.
    pub const READY: &str = "Ready";
}
/// EtcdDefragPolicy condition types.
pub mod defrag_policy {
    /// The policy parses and is being followed (ours, kept beside `Active`).
    pub const READY: &str = "Ready";
    /// The reference's (v0.5.5): True with `Scheduled` while the policy stamps runs; False with
    /// `Suspended` or `InvalidSchedule`.
    pub const ACTIVE: &str = "Active";
}

/// Every reason the operator writes, across kinds.
pub mod reason {
    // EtcdCluster Available / Degraded
    pub const QUORUM_HEALTHY: &str = "QuorumHealthy";
    pub const QUORUM_AVAILABLE: &str = "QuorumAvailable";
    pub const CLUSTER_DISCOVERED: &str = "ClusterDiscovered";
    pub const QUORUM_LOST: &str = "QuorumLost";
    pub const PAUSED: &str = "Paused";
    pub const CLUSTER_UNREACHABLE: &str = "ClusterUnreachable";
    pub const BOOTSTRAP_FAILED: &str = "BootstrapFailed";
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    pub const CERT_MANAGER_NOT_INSTALLED: &str = "CertManagerNotInstalled";
    pub const AUTH_REQUIRED_NOT_CONFIGURED: &str = "AuthRequiredNotConfigured";
    pub const AUTH_CREDENTIALS_REJECTED: &str = "AuthCredentialsRejected";
    pub const MEMBERS_UNHEALTHY: &str = "MembersUnhealthy";
    /// Not in the reference API: the spec asks for a feature this operator version does not
    /// implement yet (Available=False and Progressing=False, before the seed is created).
    pub const SPEC_NOT_SUPPORTED: &str = "SpecNotSupported";
    /// Not in the reference API: etcd answers with another cluster ID than the one latched in
    /// `status.clusterID` (the members' endpoints reach a different cluster). Nothing is changed.
    pub const CLUSTER_ID_MISMATCH: &str = "ClusterIDMismatch";
    /// Every member of a formed cluster is gone: no member has a Pod and no voter answers
    /// (Available=False, Progressing=False, Degraded=True, readyMembers 0). The reference names
    /// it; the message says how to recover (restore a snapshot into a new cluster) until the
    /// operator drives a disaster recovery itself. Clears as soon as a member Pod is back.
    pub const ALL_MEMBERS_LOST: &str = "AllMembersLost";
    /// Not in the reference API: a Secret named by `spec.tls` is missing, lacks a key, or holds
    /// PEM that cannot be used (Available=False, Progressing=True while the operator waits for
    /// it; the message names the Secret and the field).
    pub const TLS_SECRET_NOT_READY: &str = "TLSSecretNotReady";
    /// Not in the reference API: a Secret of an operator-emitted cert-manager Certificate is not
    /// issued yet (Available=False, Progressing=True; nothing is created until it is; the
    /// message names the Certificate and the Secret).
    pub const WAITING_FOR_CERTIFICATE: &str = "WaitingForCertificate";
    /// Not in the reference API: the seed's `restore` init container failed (Available=False,
    /// Progressing=True, and the seed EtcdMember's Ready=False); the message is the snapshot
    /// agent's own (a too-small volume, a missing object, a checksum mismatch, ...).
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    // EtcdCluster Progressing
    pub const INITIAL_SNAPSHOT: &str = "InitialSnapshot";
    pub const SPEC_CHANGED: &str = "SpecChanged";
    /// Not in the reference API: members are being restarted one at a time (followers first,
    /// the leader last after MoveLeader), e.g. to load a new CA bundle; the message says why and
    /// how many members are done.
    pub const ROLLING_RESTART: &str = "RollingRestart";
    /// Not in the reference API (Progressing=False): a rollout (spec edit, CA bundle, etcd image
    /// repository) would replace a Memory member that is the only voter, i.e. delete the only
    /// copy of the data; it is refused, and the message names the member and the ways out.
    pub const MEMORY_ROLLOUT_UNSAFE: &str = "MemoryRolloutUnsafe";
    /// Not in the reference API (Progressing=False): a TLS Secret now holds a certificate (peer,
    /// or operator client with mTLS) issued by a CA that running members do not trust (they
    /// loaded their CA bundle at start-up): restarting them with the new bundle would split the
    /// cluster, so nothing is restarted; the message names the Secret, the members and the
    /// two-step procedure.
    pub const UNSAFE_CA_CHANGE: &str = "UnsafeCAChange";
    pub const WAITING_FOR_SEED: &str = "WaitingForSeed";
    /// Not in the reference API (Progressing=True, Available=False): the seed's `restore` init
    /// container is downloading and restoring the snapshot of `spec.bootstrap.restore`; the
    /// progress deadline is held until it ends. The message names the source.
    pub const RESTORING: &str = "Restoring";
    pub const RETRY_AFTER_DEADLINE: &str = "RetryAfterDeadline";
    pub const RECONCILED: &str = "Reconciled";
    // EtcdMember Ready / VersionDrifted
    pub const POD_NOT_READY: &str = "PodNotReady";
    pub const DISCOVERING_MEMBER_ID: &str = "DiscoveringMemberID";
    pub const POD_READY: &str = "PodReady";
    pub const VERSION_MATCHED: &str = "VersionMatched";
    pub const VERSION_MISMATCH: &str = "VersionMismatch";
    // EtcdMember VolumeExpanded, EtcdCluster VolumesExpanded (not in the reference API)
    /// The PVC holds the size `spec.storage.size` asks for.
    pub const VOLUME_EXPANDED: &str = "VolumeExpanded";
    /// The PVC's request was raised; the storage provider is expanding it online.
    pub const VOLUME_EXPANDING: &str = "VolumeExpanding";
    /// The PVC's StorageClass does not allow expansion (or is missing): the PVC keeps its size.
    pub const VOLUME_EXPANSION_NOT_SUPPORTED: &str = "VolumeExpansionNotSupported";
    /// The API server refused the larger request; the message is its answer.
    pub const VOLUME_EXPANSION_FAILED: &str = "VolumeExpansionFailed";
    // EtcdCluster Alarm (not in the reference API)
    pub const NO_SPACE: &str = "NoSpace";
    pub const CORRUPT: &str = "Corrupt";
    pub const NO_ALARM: &str = "NoAlarm";
    // EtcdSnapshot Ready
    pub const JOB_CREATED: &str = "JobCreated";
    pub const JOB_RUNNING: &str = "JobRunning";
    pub const OPERATOR_IMAGE_NOT_CONFIGURED: &str = "OperatorImageNotConfigured";
    pub const CLUSTER_NOT_FOUND: &str = "ClusterNotFound";
    pub const AUTH_LATCH_TIMEOUT: &str = "AuthLatchTimeout";
    pub const SNAPSHOT_JOB_LOST: &str = "SnapshotJobLost";
    pub const JOB_FAILED: &str = "JobFailed";
    pub const SNAPSHOT_STORED: &str = "SnapshotStored";
    // EtcdSnapshot Verified (not in the reference API)
    /// Unknown: the snapshot is Complete and its verification Job is to run or running.
    pub const VERIFYING: &str = "Verifying";
    /// True: sha256, restore and hashkv all agree with what was recorded at save time.
    pub const SNAPSHOT_VERIFIED: &str = "SnapshotVerified";
    /// True, but the content was not compared: the save recorded no hashkv (the member did not
    /// answer `HashKV`, or the snapshot streamed from another member than the one that did), so
    /// the stored object matched its sha256 and size and the restored copy opens and hashes,
    /// but that hash was compared with nothing. Still True: the snapshot is sound as a file,
    /// and recoveries and auto-recovery take it like a compared one.
    pub const HASH_KV_NOT_COMPARED: &str = "HashKVNotCompared";
    /// False: the stored object's sha256 or size is not what the save recorded.
    pub const CHECKSUM_MISMATCH: &str = "ChecksumMismatch";
    /// False: etcdutl could not restore the stored snapshot (etcd's own trailing hash, a
    /// truncated or foreign file).
    pub const SNAPSHOT_RESTORE_FAILED: &str = "SnapshotRestoreFailed";
    /// False: the restored store's hashkv at the recorded revision differs from the cluster's.
    pub const HASH_KV_MISMATCH: &str = "HashKVMismatch";
    /// False: the verification could not be done (the store unreachable, access denied, the
    /// Job failed or its cluster is gone); nothing is known to be wrong with the snapshot.
    pub const VERIFICATION_ERROR: &str = "VerificationError";
    // EtcdSnapshotSchedule Ready, EtcdDefragPolicy Ready
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    pub const SUSPENDED: &str = "Suspended";
    pub const SCHEDULED: &str = "Scheduled";
    // EtcdDefrag Ready (also CLUSTER_NOT_FOUND and DEADLINE_EXCEEDED above)
    pub const CLUSTER_UNHEALTHY: &str = "ClusterUnhealthy";
    pub const WAITING_FOR_RUN: &str = "WaitingForRun";
    pub const CREDENTIALS_NOT_READY: &str = "CredentialsNotReady";
    pub const RUNNING: &str = "Running";
    pub const COMPLETE: &str = "Complete";
    pub const MEMBERS_FAILED: &str = "MembersFailed";
    pub const LEADER_FAILED: &str = "LeaderFailed";
    // EtcdRecovery Ready (ours; also CLUSTER_NOT_FOUND, RUNNING and COMPLETE above)
    /// Not in the reference API. On an EtcdCluster (Available=False, Progressing=True): an
    /// EtcdRecovery holds the cluster (the message names it); the cluster controller changes no
    /// membership until it lets go. On an EtcdRecovery (Ready=False): its steps are being taken.
    pub const RECOVERING: &str = "Recovering";
    /// The recovery waits: another EtcdRecovery of the cluster goes first, or no member holding
    /// data answers yet.
    pub const WAITING_FOR_SURVIVOR: &str = "WaitingForSurvivor";
    /// A survivor recovery that chooses its survivor itself waits: a member holding data has no
    /// raft position because its data dir could not be read (its position Job failed), so the
    /// member with the most data is not known. Unlike `WaitingForSurvivor` it does not clear by
    /// itself unless the cause goes: the message names the member, the read's error and the
    /// fix (name a survivor in a new EtcdRecovery, accepting that member's data is discarded).
    /// Nothing was changed.
    pub const POSITION_READ_FAILED: &str = "PositionReadFailed";
    /// A member still follows a leader in the recovery's first seconds: the recovery looks
    /// again before it calls the cluster healthy, as a member keeps reporting a leader that lost
    /// its quorum for up to an election timeout. Nothing was changed.
    pub const CONFIRMING_QUORUM_LOST: &str = "ConfirmingQuorumLost";
    /// The cluster still has a working quorum and `spec.confirmHealthyClusterRollback` is not
    /// set: nothing was changed (terminal).
    pub const HEALTHY_CLUSTER_NOT_CONFIRMED: &str = "HealthyClusterNotConfirmed";
    /// The recovery cannot be done as asked (a source this version does not build, a cluster
    /// that never formed or is paused, a named member that does not exist): nothing was changed
    /// (terminal).
    pub const RECOVERY_NOT_POSSIBLE: &str = "RecoveryNotPossible";
    /// A snapshot recovery's EtcdSnapshot cannot be restored: missing, of another cluster (or of
    /// a deleted cluster of the same name), Failed, without a stored artifact, or not `Verified=True` without
    /// `spec.allowUnverifiedSnapshot`. Nothing was changed (terminal).
    pub const SNAPSHOT_NOT_USABLE: &str = "SnapshotNotUsable";
    /// A snapshot recovery waits for its EtcdSnapshot to be Complete and verified.
    pub const WAITING_FOR_SNAPSHOT: &str = "WaitingForSnapshot";
    /// A point-in-time recovery builds the state of its revision off to the side (its build
    /// Job runs); nothing of the cluster is changed before it is done.
    pub const BUILDING_POINT_IN_TIME: &str = "BuildingPointInTime";
    /// A point-in-time recovery cannot build its state: no such schedule, nothing archived, no
    /// verified base inside the archive's run, a revision past the archive, or the build Job
    /// failed (the message says which). Nothing was changed (terminal).
    pub const POINT_IN_TIME_NOT_USABLE: &str = "PointInTimeNotUsable";
    /// A recovery stopping the members waits for a member's Pod that outlived its deletion
    /// deadline (its Node down or unreachable, its kubelet not confirming): the message names
    /// the member, the Pod's Node and what to do.
    pub const MEMBER_POD_STUCK: &str = "MemberPodStuck";
    // EtcdDefrag DefragChecked (the reference's; also RUNNING above)
    /// Another run of the same cluster goes first.
    pub const QUEUED: &str = "Queued";
    /// The cluster is not healthy enough to defragment (or cannot be reached or found).
    pub const CLUSTER_NOT_HEALTHY: &str = "ClusterNotHealthy";
    /// Not a condition's: the reason an EtcdDefrag's `status.members[]` entry starts with when
    /// the member was defragmented but its size could not be read afterwards (the reference's
    /// word; `dbSizeAfter` and `reclaimedBytes` stay unset).
    pub const AFTER_SIZE_UNAVAILABLE: &str = "AfterSizeUnavailable";
}
