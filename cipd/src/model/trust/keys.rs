//! Ed25519 key files: `cipctl keygen` writes them, the daemon reads its private key and the
//! configuration names peers' public keys.
//!
//! * The private key is PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, what `openssl genpkey
//!   -algorithm ed25519` writes), mode 0600. The daemon refuses a key file that its group or
//!   other users may read, and never logs the key.
//! * A public key is written as one line, `ed25519:` followed by the standard Base64 of its
//!   32 bytes, which is what a peer's `public_key` setting takes. The `.pub` file holds that
//!   line.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _};
use ed25519_dalek::{SigningKey, VerifyingKey};

/// Prefix of a public key written as text.
pub const PUBLIC_KEY_PREFIX: &str = "ed25519:";

/// File name of the private key `cipctl keygen` writes.
pub const PRIVATE_KEY_FILE: &str = "node.key";

/// File name of the public key `cipctl keygen` writes.
pub const PUBLIC_KEY_FILE: &str = "node.pub";

/// What went wrong with a key file or a key's text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The private key file may be read by other users.
    #[error(
        "{path}: the private key is readable by its group or other users (mode {mode:04o}); \
         run `chmod 600 {path}`"
    )]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The private key file is not a PKCS#8 Ed25519 key.
    #[error("{path}: not an Ed25519 private key in PKCS#8 PEM form: {reason}")]
    BadPrivateKey {
        /// The file.
        path: PathBuf,
        /// Why (never the key's bytes).
        reason: String,
    },
    /// A public key's text is not `ed25519:<Base64 of 32 bytes>`.
    #[error("public key {text:?}: {reason}")]
    BadPublicKey {
        /// The text as given.
        text: String,
        /// Why.
        reason: String,
    },
    /// `keygen` would overwrite a key.
    #[error("{path} exists; remove it first or choose another directory")]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// The system's random source failed.
    #[error("cannot get random bytes for a key: {0}")]
    Random(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KeyError + '_ {
    move |source| KeyError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A peer's public key, as configured.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Parses `ed25519:<Base64>`.
    ///
    /// # Errors
    /// [`KeyError::BadPublicKey`] saying what is wrong.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let bad = |reason: &str| KeyError::BadPublicKey {
            text: text.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = text.trim();
        let b64 = trimmed
            .strip_prefix(PUBLIC_KEY_PREFIX)
            .ok_or_else(|| bad("expected ed25519:<Base64 of the 32-byte key>"))?;
        let bytes = STANDARD
            .decode(b64)
            .map_err(|e| bad(&format!("not Base64: {e}")))?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| bad(&format!("{} bytes, an Ed25519 key has 32", b.len())))?;
        VerifyingKey::from_bytes(&bytes)
            .map(Self)
            .map_err(|_| bad("not a valid Ed25519 point"))
    }

    /// The key for verifying.
    pub fn verifying_key(&self) -> &VerifyingKey {
        &self.0
    }

    /// A short name for logs and `cipctl peers`: the prefix and the first 8 Base64 characters.
    pub fn short(&self) -> String {
        let text = self.to_string();
        let end = (PUBLIC_KEY_PREFIX.len() + 8).min(text.len());
        format!("{}…", &text[..end])
    }
}

impl From<VerifyingKey> for PublicKey {
    fn from(k: VerifyingKey) -> Self {
        Self(k)
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{PUBLIC_KEY_PREFIX}{}",
            STANDARD.encode(self.0.as_bytes())
        )
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

/// The node's private key. Its `Debug` never shows the key.
pub struct NodeKey {
    key: SigningKey,
    public: PublicKey,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeKey")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl NodeKey {
    /// A key from its 32-byte seed.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        let key = SigningKey::from_bytes(seed);
        let public = PublicKey(key.verifying_key());
        Self { key, public }
    }

    /// A new random key from the operating system's random source.
    ///
    /// # Errors
    /// [`KeyError::Random`] when the random source fails.
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::getrandom(&mut seed[..]).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(Self::from_seed(&seed))
    }

    /// Reads a PKCS#8 PEM private key, refusing a file its group or others may read.
    ///
    /// # Errors
    /// [`KeyError`] when the file is missing, too open or not an Ed25519 key.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        check_private_mode(path)?;
        let text = std::fs::read_to_string(path).map_err(io(path))?;
        let key = SigningKey::from_pkcs8_pem(&text).map_err(|e| KeyError::BadPrivateKey {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        let public = PublicKey(key.verifying_key());
        Ok(Self { key, public })
    }

    /// The public half.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// Signs `message`.
    pub fn sign(&self, message: &[u8]) -> ed25519_dalek::Signature {
        use ed25519_dalek::Signer as _;
        self.key.sign(message)
    }

    /// Writes `node.key` (mode 0600) and `node.pub` into `dir` (created with mode 0700 when
    /// missing); refuses to overwrite either.
    ///
    /// # Errors
    /// [`KeyError`] when a file exists or cannot be written.
    pub fn write(&self, dir: &Path) -> Result<(PathBuf, PathBuf), KeyError> {
        create_private_dir(dir).map_err(io(dir))?;
        let private = dir.join(PRIVATE_KEY_FILE);
        let public = dir.join(PUBLIC_KEY_FILE);
        for p in [&private, &public] {
            if p.exists() {
                return Err(KeyError::Exists { path: p.clone() });
            }
        }
        let pem = self
            .key
            .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
            .map_err(|e| KeyError::BadPrivateKey {
                path: private.clone(),
                reason: e.to_string(),
            })?;
        write_new(&private, pem.as_bytes(), 0o600).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => KeyError::Exists {
                path: private.clone(),
            },
            _ => KeyError::Io {
                path: private.clone(),
                source: e,
            },
        })?;
        write_new(&public, format!("{}\n", self.public).as_bytes(), 0o644).map_err(io(&public))?;
        Ok((private, public))
    }
}

/// Creates `dir` (and its parents) with mode 0700 when it is missing.
///
/// # Errors
/// As [`std::fs::DirBuilder::create`].
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    if dir.exists() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `bytes` to a new file `path` with `mode` from its creation on, durably; an
/// existing file is an error (`AlreadyExists`). See [`crate::sys::durable::create_new`].
///
/// # Errors
/// As [`crate::sys::durable::create_new`].
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    crate::sys::durable::create_new(path, bytes, mode)
}

/// Reads a `.pub` file (its first non-empty, non-comment line).
///
/// # Errors
/// [`KeyError`] when it cannot be read or parsed.
pub fn read_public(path: &Path) -> Result<PublicKey, KeyError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("");
    PublicKey::parse(line)
}

/// Refuses a private key file with any group or other permission bit.
fn check_private_mode(path: &Path) -> Result<(), KeyError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path)
        .map_err(io(path))?
        .permissions()
        .mode()
        & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyError::TooOpen {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn keygen_writes_a_private_key_only_its_owner_reads() {
        let dir = tempfile::tempdir().unwrap();
        let key = NodeKey::generate().unwrap();
        let (private, public) = key.write(&dir.path().join("keys")).unwrap();
        let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(dir.path().join("keys"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        let loaded = NodeKey::load(&private).unwrap();
        assert_eq!(loaded.public(), key.public());
        assert_eq!(&read_public(&public).unwrap(), key.public());
        let pem = std::fs::read_to_string(&private).unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
        // Never overwritten.
        assert!(matches!(
            key.write(&dir.path().join("keys")),
            Err(KeyError::Exists { .. })
        ));
        // Debug output shows the public key only.
        let debug = format!("{loaded:?}");
        assert!(
            debug.contains("ed25519:") && !debug.contains("PRIVATE"),
            "{debug}"
        );
    }

    #[test]
    fn a_key_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (private, _) = NodeKey::generate().unwrap().write(dir.path()).unwrap();
        for mode in [0o640, 0o604, 0o644] {
            std::fs::set_permissions(&private, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = NodeKey::load(&private).unwrap_err();
            assert!(matches!(e, KeyError::TooOpen { .. }), "{e}");
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o400)).unwrap();
        NodeKey::load(&private).unwrap();
    }

    #[test]
    fn bad_key_files_and_texts_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        std::fs::write(&p, "not a key").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = NodeKey::load(&p).unwrap_err();
        assert!(matches!(e, KeyError::BadPrivateKey { .. }), "{e}");
        assert!(matches!(
            NodeKey::load(&dir.path().join("missing")),
            Err(KeyError::Io { .. })
        ));
        for (text, want) in [
            ("AAAA", "expected ed25519:"),
            ("ed25519:!!", "not Base64"),
            ("ed25519:AAAA", "3 bytes"),
        ] {
            let e = PublicKey::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        let k = NodeKey::from_seed(&[7; 32]);
        let text = k.public().to_string();
        assert_eq!(
            PublicKey::parse(&format!("  {text}\n")).unwrap(),
            *k.public()
        );
        assert!(k.public().short().starts_with("ed25519:"));
    }
}
