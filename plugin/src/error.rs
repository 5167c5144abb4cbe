//! Every way a command fails, each with the sentence a user reads: the object, the field or flag,
//! the value and what to do. A refusal from the apiserver is classified once here (404 and 403
//! by their status code); no command matches message strings.

use std::fmt;

/// What a command asked the apiserver: the verb and resource a 403 names (as a Role grants them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// `get`, `list`, `create`, ...
    pub verb: &'static str,
    /// The resource as RBAC names it: `etcdclusters.etcd-operator.cozystack.io`, `pods/exec`.
    pub resource: &'static str,
    pub namespace: String,
    /// The object, for a call on one (`get`, `create`).
    pub name: Option<String>,
}

impl Call {
    pub fn new(verb: &'static str, resource: &'static str, namespace: &str) -> Self {
        Self {
            verb,
            resource,
            namespace: namespace.to_string(),
            name: None,
        }
    }

    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        write!(f, " in namespace {}", self.namespace)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad arguments: exit status 2, as clap's own.
    #[error("{0}")]
    Usage(String),
    #[error("{kind} {name} not found in namespace {namespace}{hint}")]
    NotFound {
        kind: &'static str,
        name: String,
        namespace: String,
        /// How to find the right name, with its leading separator.
        hint: String,
    },
    #[error(
        "permission denied: you may not {verb} {resource} in namespace {namespace} (the apiserver \
         answered 403 Forbidden: {message}). Ask your cluster admin for a Role granting the verb \
         {verb} on {resource}; docs/kubectl-plugin.md lists what each command needs"
    )]
    Forbidden {
        verb: &'static str,
        resource: &'static str,
        namespace: String,
        message: String,
    },
    #[error("{call}: {source}")]
    Api {
        call: Call,
        #[source]
        source: Box<kube::Error>,
    },
    /// The kubeconfig could not be read or used.
    #[error("{0}")]
    Config(String),
    /// A command refused before changing anything (a snapshot that is not Verified, no terminal
    /// to confirm on).
    #[error("{0}; nothing was created")]
    Refused(String),
    /// What the command created ended Failed.
    #[error("{0}")]
    Failed(String),
    /// Following it took longer than --timeout; the object carries on without us.
    #[error("{0}")]
    TimedOut(String),
    #[error("{0}")]
    Exec(String),
}

impl Error {
    /// The apiserver's answer to `call`: a 404 as "not found" of `kind`, a 403 as the verb and
    /// resource the user lacks, anything else with the call it answered.
    pub fn from_kube(call: Call, kind: &'static str, source: kube::Error) -> Self {
        match &source {
            kube::Error::Api(status) if status.code == 404 => Error::NotFound {
                kind,
                name: call.name.clone().unwrap_or_default(),
                namespace: call.namespace.clone(),
                hint: String::new(),
            },
            kube::Error::Api(status) if status.code == 403 => Error::Forbidden {
                verb: call.verb,
                resource: call.resource,
                namespace: call.namespace.clone(),
                message: status.message.clone(),
            },
            _ => Error::Api {
                call,
                source: Box::new(source),
            },
        }
    }

    /// The same error with `hint` appended to a "not found" (how to list the right names).
    pub fn hint(self, hint: impl Into<String>) -> Self {
        match self {
            Error::NotFound {
                kind,
                name,
                namespace,
                ..
            } => Error::NotFound {
                kind,
                name,
                namespace,
                hint: format!(": {}", hint.into()),
            },
            other => other,
        }
    }

    /// The process exit status: 2 for bad arguments (as clap), 1 for the rest.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "Forbidden")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_403_names_the_verb_the_resource_and_the_namespace() {
        let call = Call::new(
            "create",
            "etcdrecoveries.etcd-operator.cozystack.io",
            "prod",
        );
        let e = Error::from_kube(
            call,
            "EtcdRecovery",
            refused(403, "User \"bob\" cannot create"),
        );
        let text = e.to_string();
        assert!(
            text.starts_with(
                "permission denied: you may not create etcdrecoveries.etcd-operator.cozystack.io \
                 in namespace prod"
            ),
            "{text}"
        );
        assert!(text.contains("User \"bob\" cannot create"), "{text}");
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn a_404_is_not_found_with_the_hint_that_lists_names() {
        let call =
            Call::new("get", "etcdclusters.etcd-operator.cozystack.io", "prod").named("dmeo");
        let e = Error::from_kube(call, "EtcdCluster", refused(404, "not found"))
            .hint("kubectl get etcdclusters -n prod lists them");
        assert_eq!(
            e.to_string(),
            "EtcdCluster dmeo not found in namespace prod: kubectl get etcdclusters -n prod lists them"
        );
    }

    #[test]
    fn another_refusal_keeps_the_call_it_answered() {
        let call = Call::new("get", "pods", "prod").named("p");
        let e = Error::from_kube(call, "Pod", refused(500, "etcd timed out"));
        assert!(
            e.to_string().starts_with("get pods p in namespace prod: "),
            "{e}"
        );
    }

    #[test]
    fn bad_arguments_exit_2_as_clap_does() {
        assert_eq!(Error::Usage("x".into()).exit_code(), 2);
    }
}
