//! The registry's ordinary authentication: the credentials `docker login` (or `podman login`,
//! `oras login`) keeps in the docker config, `$DOCKER_CONFIG/config.json` or
//! `~/.docker/config.json`, under `auths` by host (`"auth": base64(USER:PASSWORD)`).
//! Credential helpers (`credsStore`, `credHelpers`) are not run.

use base64::Engine;

/// The user and password the docker config keeps for `host`, if any.
pub fn docker_credentials(host: &str) -> Option<(String, String)> {
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".docker")))?;
    let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
    credentials_in(&text, host)
}

fn credentials_in(text: &str, host: &str) -> Option<(String, String)> {
    let config: serde_json::Value = serde_json::from_str(text).ok()?;
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

#[cfg(test)]
mod tests {
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
}
