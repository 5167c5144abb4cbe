//! Kubernetes' `$(VAR)` expansion (k8s.io/kubernetes third_party/forked/golang/expansion), used for
//! env values, `command`, `args` and `subPathExpr`: `$(NAME)` becomes the value when `NAME` is
//! defined and stays as written when it is not, `$$` is a literal `$`, anything else is kept.

/// Expand `input` with `lookup`; undefined references are left untouched.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match lookup(name) {
                            Some(value) => out.push_str(&value),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        close + 1
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    // `$` followed by something else: keep both (the next char may be multi-byte).
                    out.push('$');
                    0
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if checkpoint < input.len() {
        out.push_str(&input[checkpoint..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "POD_NAME" => Some("etcd-0".into()),
            "NS" => Some("default".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_defined_references() {
        assert_eq!(
            expand("http://$(POD_NAME).etcd.$(NS).svc:2380", env),
            "http://etcd-0.etcd.default.svc:2380"
        );
        assert_eq!(expand("$(EMPTY)x", env), "x");
    }

    #[test]
    fn keeps_undefined_and_incomplete_references() {
        assert_eq!(expand("$(NOPE)-$(POD_NAME)", env), "$(NOPE)-etcd-0");
        assert_eq!(expand("a$(POD_NAME", env), "a$(POD_NAME");
        assert_eq!(expand("$", env), "$");
        assert_eq!(expand("a$", env), "a$");
    }

    #[test]
    fn dollar_dollar_escapes() {
        assert_eq!(expand("$$(POD_NAME)", env), "$(POD_NAME)");
        assert_eq!(expand("$$$(POD_NAME)", env), "$etcd-0");
        assert_eq!(expand("cost: $5 $x é$é", env), "cost: $5 $x é$é");
    }
}
