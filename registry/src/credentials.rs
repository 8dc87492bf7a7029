//! The registry's ordinary authentication: the credentials `docker login` (or `podman login`,
//! `oras login`) keeps in the docker config, `$DOCKER_CONFIG/config.json` or
//! `~/.docker/config.json`: as docker reads them, the host's credential helper
//! (`credHelpers`), else the config's store (`credsStore`) — each a program
//! `docker-credential-NAME` on the PATH, asked `get` with the host on its stdin — else `auths`
//! by host (`"auth": base64(USER:PASSWORD)`). A helper that fails or knows nothing of the host
//! leaves the next way to try. Identity tokens (a helper's `<token>` user) are not used.

use base64::Engine;

/// A registry that refused access: the one way every path says it — `mesh push`, `mesh pull`,
/// `mesh follow`, `mesh rollout`, `mesh prune`, `mesh images lock`, and a switch fetching a
/// container image through the engine. Credentials that were sent and refused (a wrong
/// password) and none to send are two facts, each named with what was tried and where it was
/// looked for. Either is a refusal another try as it is cannot help (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.sentence())]
pub struct Denied {
    /// The registry's host, as the docker config keys it.
    pub registry: String,
    /// Whether the docker config gave credentials for it (they were sent, and refused).
    pub had_credentials: bool,
    /// Which credentials were tried, from where — or where none were found ([`Lookup::said`]).
    pub tried: String,
    /// The registry's answer, as it came (through the engine, or to the mesh's own client).
    pub message: String,
}

impl Denied {
    /// The registry `registry` refused access with `message`, after the docker config was
    /// looked up as `lookup` says.
    pub fn new(registry: &str, lookup: &Lookup, message: impl Into<String>) -> Self {
        Self {
            registry: registry.to_owned(),
            had_credentials: lookup.login.is_some(),
            tried: lookup.said.clone(),
            message: message.into(),
        }
    }

    fn sentence(&self) -> String {
        let registry = &self.registry;
        let fact = if self.had_credentials {
            format!("the registry {registry} denied the docker config's credentials")
        } else {
            format!(
                "the registry {registry} denied access and the docker config has no credentials \
                 for it (docker login {registry}, or DOCKER_CONFIG)"
            )
        };
        format!(
            "{fact}: {}; credentials tried: {}",
            self.message.trim(),
            self.tried
        )
    }
}

/// What the docker config gives for a host, and where it was looked for, in words.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// The user and password, if any.
    pub login: Option<(String, String)>,
    /// Which credentials, from where — or where none were found — for a message.
    pub said: String,
}

/// The credentials the docker config keeps for `host`, and where they were looked for.
pub fn docker_login(host: &str) -> Lookup {
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".docker")));
    login_in(dir.as_deref(), host)
}

/// [`docker_login`] with the docker config's folder `dir`.
fn login_in(dir: Option<&std::path::Path>, host: &str) -> Lookup {
    let Some(dir) = dir else {
        return Lookup {
            login: None,
            said: "none (neither DOCKER_CONFIG nor HOME is set, so no docker config was read)"
                .into(),
        };
    };
    let file = dir.join("config.json");
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Lookup {
            login: None,
            said: format!(
                "none (there is no docker config at {}: `docker login {host}` writes one, or \
                 set DOCKER_CONFIG)",
                file.display()
            ),
        };
    };
    let login = credentials_in(&text, host);
    let said = match &login {
        Some((user, _)) => format!(
            "the user {} for {host} from {} (its credHelpers, credsStore or auths)",
            mesh_lib::text::escape(user),
            file.display()
        ),
        None => format!(
            "none ({} has no credentials for {host} in credHelpers, credsStore or auths: \
             `docker login {host}`)",
            file.display()
        ),
    };
    Lookup { login, said }
}

fn credentials_in(text: &str, host: &str) -> Option<(String, String)> {
    credentials_with(text, host, &|name, host| {
        from_helper(
            std::ffi::OsStr::new(&format!("docker-credential-{name}")),
            host,
        )
    })
}

/// A user and a password.
type Login = (String, String);

/// What the docker config `text` gives for `host`, with `helper(NAME, host)` asking a
/// credential helper.
fn credentials_with(
    text: &str,
    host: &str,
    helper: &dyn Fn(&str, &str) -> Option<Login>,
) -> Option<Login> {
    let config: serde_json::Value = serde_json::from_str(text).ok()?;
    let named = config
        .get("credHelpers")
        .and_then(|h| h.get(host))
        .and_then(|n| n.as_str());
    let store = config.get("credsStore").and_then(|n| n.as_str());
    for name in named.into_iter().chain(store) {
        if let Some(found) = helper(name, host) {
            return Some(found);
        }
    }
    let auths = config.get("auths")?.as_object()?;
    let entry = auths.iter().find_map(|(k, v)| {
        let k = k
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let k = k.split('/').next().unwrap_or(k);
        (k == host).then_some(v)
    })?;
    if let (Some(u), Some(p)) = (entry.get("username"), entry.get("password")) {
        return Some((u.as_str()?.to_owned(), p.as_str()?.to_owned()));
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(entry.get("auth")?.as_str()?)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// Asks the credential helper `program` for `host` (`program get`, the host on its stdin, a
/// JSON `{ "Username", "Secret" }` back), bounded to 10 s.
fn from_helper(program: &std::ffi::OsStr, host: &str) -> Option<Login> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    if let Some(mut stdin) = child.stdin.take() {
        let _gone = stdin.write_all(host.as_bytes());
    }
    let started = std::time::Instant::now();
    while child.try_wait().ok()?.is_none() {
        if started.elapsed() > std::time::Duration::from_secs(10) {
            let _killed = child.kill();
            let _reaped = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let user = v.get("Username")?.as_str()?;
    let secret = v.get("Secret")?.as_str()?;
    (user != "<token>" && !secret.is_empty()).then(|| (user.to_owned(), secret.to_owned()))
}

#[cfg(test)]
mod tests {
    /// What was tried, and where, is said: the file and the user found, or the file that has
    /// no entry for the host, or that there is no file — never a password.
    #[test]
    fn the_lookup_says_what_it_tried_and_where() {
        let dir = tempfile::tempdir().unwrap();
        let said = super::login_in(Some(dir.path()), "reg.example:5000").said;
        assert!(
            said.contains("there is no docker config at") && said.contains("config.json"),
            "{said}"
        );
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"auths":{"reg.example:5000":{"auth":"dXNlcjpwYXNz"}}}"#,
        )
        .unwrap();
        let found = super::login_in(Some(dir.path()), "reg.example:5000");
        assert_eq!(found.login, Some(("user".into(), "pass".into())));
        assert!(
            found
                .said
                .contains("the user user for reg.example:5000 from")
                && !found.said.contains("pass"),
            "{}",
            found.said
        );
        let none = super::login_in(Some(dir.path()), "other.example").said;
        assert!(
            none.contains("has no credentials for other.example"),
            "{none}"
        );
    }

    /// A wrong password and no credentials are two facts, each said in its own words with
    /// what was tried and where; the password never.
    #[test]
    fn a_denial_names_the_fact_and_what_was_tried() {
        let dir = tempfile::tempdir().unwrap();
        let none = super::login_in(Some(dir.path()), "reg.example:5000");
        let said = super::Denied::new("reg.example:5000", &none, "Not authorized").to_string();
        assert!(
            said.starts_with(
                "the registry reg.example:5000 denied access and the docker config has no \
                 credentials for it (docker login reg.example:5000, or DOCKER_CONFIG): Not \
                 authorized; credentials tried: none (there is no docker config at"
            ),
            "{said}"
        );
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"auths":{"reg.example:5000":{"auth":"dXNlcjpwYXNz"}}}"#,
        )
        .unwrap();
        let found = super::login_in(Some(dir.path()), "reg.example:5000");
        let said = super::Denied::new("reg.example:5000", &found, "Not authorized").to_string();
        assert!(
            said.starts_with(
                "the registry reg.example:5000 denied the docker config's credentials: Not \
                 authorized; credentials tried: the user user for reg.example:5000 from"
            ) && !said.contains("pass"),
            "{said}"
        );
    }

    /// `auths` by host, with or without a scheme, as `auth` or as user and password.
    #[test]
    fn read_from_the_docker_config() {
        let text = r#"{"auths":{"https://reg.example:5000/v1/":{"auth":"dXNlcjpwYXNz"},"other.example":{"username":"u","password":"p"}}}"#;
        assert_eq!(
            super::credentials_in(text, "reg.example:5000"),
            Some(("user".into(), "pass".into()))
        );
        assert_eq!(
            super::credentials_in(text, "other.example"),
            Some(("u".into(), "p".into()))
        );
        assert_eq!(super::credentials_in(text, "third.example"), None);
    }

    /// The host's helper first, then the store, then `auths`; a helper that knows nothing of
    /// the host leaves the next.
    #[test]
    fn helpers_come_first() {
        let text = r#"{"credHelpers":{"a.example":"one"},"credsStore":"two","auths":{"a.example":{"auth":"dXNlcjpwYXNz"},"c.example":{"auth":"dXNlcjpwYXNz"}}}"#;
        let helper = |name: &str, host: &str| match (name, host) {
            ("one", "a.example") => Some(("one-user".to_owned(), "s1".to_owned())),
            ("two", "b.example") => Some(("two-user".to_owned(), "s2".to_owned())),
            _ => None,
        };
        let got = |host| super::credentials_with(text, host, &helper).map(|(u, _)| u);
        assert_eq!(got("a.example").as_deref(), Some("one-user"));
        assert_eq!(got("b.example").as_deref(), Some("two-user"));
        assert_eq!(got("c.example").as_deref(), Some("user"));
        assert_eq!(got("d.example"), None);
    }

    /// A real helper process: asked `get` with the host on its stdin; one that fails, or
    /// answers with an identity token, gives nothing.
    #[test]
    fn a_helper_is_asked_as_docker_asks_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("docker-credential-test");
        std::fs::write(
            &program,
            "#!/bin/sh\n[ \"$1\" = get ] || exit 3\nread host\ncase \"$host\" in\n  reg.example:5000) echo '{\"ServerURL\":\"reg.example:5000\",\"Username\":\"ci\",\"Secret\":\"s3cret\"}' ;;\n  tok.example) echo '{\"Username\":\"<token>\",\"Secret\":\"t\"}' ;;\n  *) echo 'credentials not found in native keychain' >&2; exit 1 ;;\nesac\n",
        )
        .unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ask = |host| super::from_helper(program.as_os_str(), host);
        assert_eq!(
            ask("reg.example:5000"),
            Some(("ci".to_owned(), "s3cret".to_owned()))
        );
        assert_eq!(ask("tok.example"), None);
        assert_eq!(ask("other.example"), None);
        assert_eq!(
            super::from_helper(
                std::ffi::OsStr::new("/nonexistent/docker-credential-x"),
                "h"
            ),
            None
        );
    }
}
