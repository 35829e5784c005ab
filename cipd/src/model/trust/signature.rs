//! Signed CIP-HINTs: the bytes signed, signing, and checking a peer's hint against its
//! configured keys and policy (PROTOCOL.md, "Signed hints").
//!
//! * `Certification-Type` is [`CERTIFICATION_TYPE`] and `Certification` the standard Base64
//!   of the 64-byte Ed25519 signature.
//! * The signed bytes are the canonical SOIF of the hint (the writer of
//!   [`CipHint::to_soif`]) with both Certification attributes left out, so what a node signs
//!   and what a receiver checks do not depend on how the object was laid out on the wire.
//! * `Date` is inside the signed bytes. A signed hint without one is refused. A receiver
//!   refuses a hint dated before the last one it took from the same peer (a replay), and one
//!   dated further ahead of its own clock than the allowed skew.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use cip_proto::cip::ResponseCode;
use hints::hint::CipHint;

use super::keys::{NodeKey, PublicKey};

/// The `Certification-Type` of a cipd signature.
pub const CERTIFICATION_TYPE: &str = "Ed25519";

/// What a node does with a peer's signatures (`signatures` in a `[[peer]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Every hint must carry a valid signature by one of the peer's keys.
    Require,
    /// A signed hint must verify; an unsigned one is taken.
    VerifyIfPresent,
    /// Signatures are not looked at.
    #[default]
    Ignore,
}

impl Policy {
    /// Parses the configuration's spelling.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "require" => Some(Self::Require),
            "verify-if-present" => Some(Self::VerifyIfPresent),
            "ignore" => Some(Self::Ignore),
            _ => None,
        }
    }

    /// The configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Require => "require",
            Self::VerifyIfPresent => "verify-if-present",
            Self::Ignore => "ignore",
        }
    }
}

/// A peer's signature settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerTrust {
    /// The peer's public keys (several while it rotates keys).
    pub keys: Vec<PublicKey>,
    /// What to do with its signatures.
    pub policy: Policy,
}

/// Why a hint's signature was not accepted; [`SignatureError::code`] is the CIP answer
/// (RFC 2652 §4.2: the 530 series).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The policy requires a signature and the hint has none.
    #[error("the peer must sign its hints (policy require) and this one has no Certification")]
    Missing,
    /// The signature does not verify with any of the peer's keys.
    #[error("the signature does not verify with the peer's configured key(s)")]
    Invalid,
    /// `Certification` is not a signature.
    #[error("Certification is not the Base64 of a 64-byte Ed25519 signature: {0}")]
    Malformed(String),
    /// A signed hint without `Date` cannot be bounded against replay.
    #[error("a signed hint must carry a Date")]
    NoDate,
    /// `Date` does not parse.
    #[error("Date {0:?} is not an RFC 1123 date")]
    BadDate(String),
    /// Older than the last hint taken from the peer.
    #[error("Date {date} is older than the peer's last accepted hint ({last}): a replay")]
    Replayed {
        /// The hint's date.
        date: String,
        /// The last accepted one.
        last: String,
    },
    /// Dated too far ahead of this node's clock.
    #[error(
        "Date {date} is {ahead_secs} s ahead of this node's clock (allowed skew {skew_secs} s)"
    )]
    Future {
        /// The hint's date.
        date: String,
        /// How far ahead.
        ahead_secs: u64,
        /// The allowed skew.
        skew_secs: u64,
    },
    /// A certification type this node cannot check.
    #[error("Certification-Type {0:?} cannot be checked; this node checks {CERTIFICATION_TYPE}")]
    UnknownType(String),
    /// No key to check with.
    #[error("the hint is signed but no public key is configured for the peer")]
    NoKey,
}

impl SignatureError {
    /// The 53x code RFC 2652 §4.2 prescribes for this refusal.
    pub fn code(&self) -> ResponseCode {
        match self {
            Self::Missing => ResponseCode::SignatureRequired,
            Self::UnknownType(_) | Self::NoKey => ResponseCode::CannotCheckSignature,
            _ => ResponseCode::InvalidSignature,
        }
    }

    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Invalid | Self::Malformed(_) => "invalid",
            Self::NoDate | Self::BadDate(_) => "undated",
            Self::Replayed { .. } => "replayed",
            Self::Future { .. } => "future",
            Self::UnknownType(_) | Self::NoKey => "unverifiable",
        }
    }
}

/// What checking found when the hint was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Signed by this key; `date` is the hint's date, for the replay check.
    Valid {
        /// The key that verified (boxed: the other variants are empty).
        key: Box<PublicKey>,
        /// The hint's `Date`.
        date: SystemTime,
    },
    /// Not signed, and the policy allows it.
    Unsigned,
    /// Signed, but the policy ignores signatures.
    Ignored,
}

impl Verdict {
    /// How `cipctl peers` shows it.
    pub fn describe(&self) -> String {
        match self {
            Self::Valid { key, .. } => format!("valid {}", key.short()),
            Self::Unsigned => "unsigned".to_owned(),
            Self::Ignored => "signed, not checked".to_owned(),
        }
    }
}

fn is_certification(name: &str) -> bool {
    name.eq_ignore_ascii_case("Certification-Type") || name.eq_ignore_ascii_case("Certification")
}

/// The bytes a signature covers: the hint's canonical SOIF without its Certification
/// attributes.
pub fn signed_bytes(hint: &CipHint) -> Vec<u8> {
    let mut soif = hint.to_soif();
    soif.attributes
        .retain(|a| !is_certification(a.name.as_str()));
    soif.to_bytes()
}

/// Signs `hint` in place with `key`, dating it `now` when it has no `Date`.
pub fn sign(hint: &mut CipHint, key: &NodeKey, now: SystemTime) {
    if hint.date.is_none() {
        hint.date = Some(hints::hint::format_date(now));
    }
    hint.certification_type = None;
    hint.certification = None;
    let signature = key.sign(&signed_bytes(hint));
    hint.certification_type = Some(CERTIFICATION_TYPE.to_owned());
    hint.certification = Some(STANDARD.encode(signature.to_bytes()).into());
}

/// Checks `hint` from a peer with settings `trust`: its signature, and that its date is not
/// before `last` (the date of the last hint taken from that peer) nor more than `skew`
/// ahead of `now`.
///
/// # Errors
/// [`SignatureError`] when the hint must be refused.
pub fn check(
    hint: &CipHint,
    trust: &PeerTrust,
    last: Option<SystemTime>,
    now: SystemTime,
    skew: Duration,
) -> Result<Verdict, SignatureError> {
    if trust.policy == Policy::Ignore {
        return Ok(match hint.certification {
            Some(_) => Verdict::Ignored,
            None => Verdict::Unsigned,
        });
    }
    let Some(signature) = hint.certification.as_ref() else {
        return match trust.policy {
            Policy::Require => Err(SignatureError::Missing),
            _ => Ok(Verdict::Unsigned),
        };
    };
    let kind = hint.certification_type.as_deref().unwrap_or("");
    if !kind.trim().eq_ignore_ascii_case(CERTIFICATION_TYPE) {
        return Err(SignatureError::UnknownType(kind.to_owned()));
    }
    if trust.keys.is_empty() {
        return Err(SignatureError::NoKey);
    }
    let text = std::str::from_utf8(signature)
        .map_err(|_| SignatureError::Malformed("not ASCII".into()))?
        .trim();
    let raw = STANDARD
        .decode(text)
        .map_err(|e| SignatureError::Malformed(e.to_string()))?;
    let raw: [u8; 64] = raw
        .try_into()
        .map_err(|r: Vec<u8>| SignatureError::Malformed(format!("{} bytes", r.len())))?;
    let signature = ed25519_dalek::Signature::from_bytes(&raw);
    let message = signed_bytes(hint);
    let key = trust
        .keys
        .iter()
        .find(|k| {
            k.verifying_key()
                .verify_strict(&message, &signature)
                .is_ok()
        })
        .ok_or(SignatureError::Invalid)?;
    // Only a verified date means anything.
    let date_text = hint.date.as_deref().ok_or(SignatureError::NoDate)?;
    let date = hints::hint::parse_date(date_text)
        .map_err(|_| SignatureError::BadDate(date_text.to_owned()))?;
    if let Ok(ahead) = date.duration_since(now)
        && ahead > skew
    {
        return Err(SignatureError::Future {
            date: date_text.to_owned(),
            ahead_secs: ahead.as_secs(),
            skew_secs: skew.as_secs(),
        });
    }
    if let Some(last) = last
        && date < last
    {
        return Err(SignatureError::Replayed {
            date: date_text.to_owned(),
            last: hints::hint::format_date(last),
        });
    }
    Ok(Verdict::Valid {
        key: Box::new(key.clone()),
        date,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hints::hint::{AttrSpec, WeightEntry, Weightlist};

    fn hint() -> CipHint {
        let spec = AttrSpec::parse("DOCUMENT:Author").unwrap();
        CipHint {
            url: "http://leaf.example/".into(),
            attributes: vec![spec.clone()],
            total_object_count: 10,
            weightlists: vec![(
                spec,
                Weightlist::new(vec![
                    WeightEntry {
                        value: Bytes::from_static(b"Garcia"),
                        count: 4,
                    },
                    WeightEntry {
                        value: Bytes::from_static("Müller, Ö".as_bytes()),
                        count: 2,
                    },
                ]),
            )],
            ..CipHint::default()
        }
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    const NOW: u64 = 1_800_000_000;
    const SKEW: Duration = Duration::from_secs(300);

    fn trust(key: &NodeKey, policy: Policy) -> PeerTrust {
        PeerTrust {
            keys: vec![key.public().clone()],
            policy,
        }
    }

    /// Signs, then sends the hint through the wire form and back.
    fn signed_on_the_wire(key: &NodeKey, date: SystemTime) -> CipHint {
        let mut h = hint();
        sign(&mut h, key, date);
        let bytes = h.to_soif().to_bytes();
        let objs = cip_proto::soif::parse_all(Bytes::from(bytes), Default::default()).unwrap();
        CipHint::from_soif(&objs[0]).unwrap().0
    }

    #[test]
    fn a_signed_hint_verifies_after_the_wire_and_nothing_else_does() {
        let key = NodeKey::from_seed(&[1; 32]);
        let other = NodeKey::from_seed(&[2; 32]);
        let h = signed_on_the_wire(&key, at(NOW));
        assert_eq!(h.certification_type.as_deref(), Some(CERTIFICATION_TYPE));
        let v = check(&h, &trust(&key, Policy::Require), None, at(NOW), SKEW).unwrap();
        assert_eq!(
            v,
            Verdict::Valid {
                key: Box::new(key.public().clone()),
                date: at(NOW)
            }
        );
        // Rotation: any configured key may verify.
        let both = PeerTrust {
            keys: vec![other.public().clone(), key.public().clone()],
            policy: Policy::VerifyIfPresent,
        };
        assert!(matches!(
            check(&h, &both, None, at(NOW), SKEW),
            Ok(Verdict::Valid { .. })
        ));
        assert_eq!(
            check(&h, &trust(&other, Policy::Require), None, at(NOW), SKEW),
            Err(SignatureError::Invalid)
        );
        // Any change to a signed field breaks it: a count, a value, the total, the date.
        let mut inflated = h.clone();
        inflated.weightlists[0].1.entries_mut()[0].count = 9;
        let mut renamed = h.clone();
        renamed.weightlists[0].1.entries_mut()[1].value = Bytes::from_static(b"Muller, O");
        let mut total = h.clone();
        total.total_object_count = 11;
        let mut redated = h.clone();
        redated.date = Some(hints::hint::format_date(at(NOW + 1)));
        for forged in [inflated, renamed, total, redated] {
            let e = check(&forged, &trust(&key, Policy::Require), None, at(NOW), SKEW);
            assert_eq!(e, Err(SignatureError::Invalid));
            assert_eq!(e.unwrap_err().code(), ResponseCode::InvalidSignature);
        }
    }

    #[test]
    fn policies_decide_about_unsigned_and_uncheckable_hints() {
        let key = NodeKey::from_seed(&[1; 32]);
        let plain = hint();
        let e = check(&plain, &trust(&key, Policy::Require), None, at(NOW), SKEW).unwrap_err();
        assert_eq!(e, SignatureError::Missing);
        assert_eq!(e.code(), ResponseCode::SignatureRequired);
        assert_eq!(
            check(
                &plain,
                &trust(&key, Policy::VerifyIfPresent),
                None,
                at(NOW),
                SKEW
            ),
            Ok(Verdict::Unsigned)
        );
        let mut garbage = signed_on_the_wire(&key, at(NOW));
        garbage.certification = Some(Bytes::from_static(b"not base64!"));
        assert_eq!(
            check(&garbage, &trust(&key, Policy::Ignore), None, at(NOW), SKEW),
            Ok(Verdict::Ignored)
        );
        assert!(matches!(
            check(
                &garbage,
                &trust(&key, Policy::VerifyIfPresent),
                None,
                at(NOW),
                SKEW
            ),
            Err(SignatureError::Malformed(_))
        ));
        let mut pgp = signed_on_the_wire(&key, at(NOW));
        pgp.certification_type = Some("PGP-Signature".into());
        let e = check(&pgp, &trust(&key, Policy::Require), None, at(NOW), SKEW).unwrap_err();
        assert_eq!(e.code(), ResponseCode::CannotCheckSignature);
        let no_keys = PeerTrust {
            keys: vec![],
            policy: Policy::VerifyIfPresent,
        };
        let signed = signed_on_the_wire(&key, at(NOW));
        assert_eq!(
            check(&signed, &no_keys, None, at(NOW), SKEW),
            Err(SignatureError::NoKey)
        );
    }

    #[test]
    fn dates_bound_replay() {
        let key = NodeKey::from_seed(&[1; 32]);
        let t = trust(&key, Policy::Require);
        let old = signed_on_the_wire(&key, at(NOW - 60));
        let new = signed_on_the_wire(&key, at(NOW));
        // The same hint again (a re-poll of an unchanged hint) is fine; an older one is not.
        assert!(check(&new, &t, Some(at(NOW)), at(NOW), SKEW).is_ok());
        let e = check(&old, &t, Some(at(NOW)), at(NOW), SKEW).unwrap_err();
        assert!(matches!(e, SignatureError::Replayed { .. }), "{e}");
        assert_eq!(e.label(), "replayed");
        // Ahead of the clock by more than the skew.
        let future = signed_on_the_wire(&key, at(NOW + 301));
        assert!(matches!(
            check(&future, &t, None, at(NOW), SKEW),
            Err(SignatureError::Future {
                ahead_secs: 301,
                ..
            })
        ));
        assert!(check(&future, &t, None, at(NOW + 1), SKEW).is_ok());
        // A signature over a hint without a date is refused.
        let mut undated = hint();
        let sig = key.sign(&signed_bytes(&undated));
        undated.certification_type = Some(CERTIFICATION_TYPE.into());
        undated.certification = Some(STANDARD.encode(sig.to_bytes()).into());
        assert_eq!(
            check(&undated, &t, None, at(NOW), SKEW),
            Err(SignatureError::NoDate)
        );
    }

    #[test]
    fn the_signed_bytes_leave_out_only_the_certification() {
        let key = NodeKey::from_seed(&[1; 32]);
        let h = signed_on_the_wire(&key, at(NOW));
        let bytes = String::from_utf8(signed_bytes(&h)).unwrap();
        assert!(
            bytes.starts_with("@CIP-HINT { http://leaf.example/\n"),
            "{bytes}"
        );
        assert!(!bytes.contains("Certification"), "{bytes}");
        assert!(bytes.contains("Date{"), "{bytes}");
        assert!(bytes.contains("Müller\\, Ö;2"), "{bytes}");
    }
}
