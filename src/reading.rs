//! One typed reading of a fact: its value, absent (read, and the thing is not there), or
//! unknown with the reason it could not be read (missing file, no permission, library absent,
//! malformed). Carried with the fact itself, never in a side table or as a `String` error.
//!
//! JSON: exactly one key, `{"value": ...}`, `{"absent": "why"}` or `{"unknown": "why"}`
//! (docs/schemas.md). Reports written before this type (`gpudoctor.probe/1`,
//! `gpudoctor.nccl/1`) carried serde's `Result` encoding, `{"Ok": ...}` / `{"Err": "why"}`;
//! those still read back, as a value and as unknown.
//!
//! This module must not judge: it has no `Default`, no conversion that turns unknown into a
//! value, and no "is good" test; a judge matches on all three cases.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A fact as read: its value, absent with why, or unknown with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[must_use = "a reading that is not looked at is a fact thrown away"]
pub enum Reading<T> {
    /// Read, and this is what it holds. (`Ok` in reports before the `Reading` shape.)
    #[serde(alias = "Ok")]
    Value(T),
    /// Read, and the thing is not there (no such attribute, not supported), with why.
    Absent(String),
    /// Could not be read, with why. (`Err` in reports before the `Reading` shape.)
    #[serde(alias = "Err")]
    Unknown(String),
}

impl<T> Reading<T> {
    /// Unknown, with the reason it could not be read.
    pub fn unknown(reason: impl Into<String>) -> Self {
        Reading::Unknown(reason.into())
    }

    /// Absent: read, and the thing is not there, with why.
    pub fn absent(reason: impl Into<String>) -> Self {
        Reading::Absent(reason.into())
    }

    /// A value from `Ok`; unknown from `Err`, its words the reason.
    pub fn from_result<E: fmt::Display>(r: Result<T, E>) -> Self {
        match r {
            Ok(v) => Reading::Value(v),
            Err(e) => Reading::Unknown(e.to_string()),
        }
    }

    /// The value, where there is one.
    pub fn value(&self) -> Option<&T> {
        match self {
            Reading::Value(v) => Some(v),
            _ => None,
        }
    }

    /// The value, where there is one, taken.
    pub fn into_value(self) -> Option<T> {
        match self {
            Reading::Value(v) => Some(v),
            _ => None,
        }
    }

    /// Why there is no value (absent or unknown); None for a value.
    pub fn why(&self) -> Option<&str> {
        match self {
            Reading::Value(_) => None,
            Reading::Absent(w) | Reading::Unknown(w) => Some(w),
        }
    }

    pub fn is_value(&self) -> bool {
        matches!(self, Reading::Value(_))
    }

    pub fn as_ref(&self) -> Reading<&T> {
        match self {
            Reading::Value(v) => Reading::Value(v),
            Reading::Absent(w) => Reading::Absent(w.clone()),
            Reading::Unknown(w) => Reading::Unknown(w.clone()),
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Reading<U> {
        match self {
            Reading::Value(v) => Reading::Value(f(v)),
            Reading::Absent(w) => Reading::Absent(w),
            Reading::Unknown(w) => Reading::Unknown(w),
        }
    }

    /// A reading derived from this one's value; absent and unknown carry through.
    pub fn and_then<U>(self, f: impl FnOnce(T) -> Reading<U>) -> Reading<U> {
        match self {
            Reading::Value(v) => f(v),
            Reading::Absent(w) => Reading::Absent(w),
            Reading::Unknown(w) => Reading::Unknown(w),
        }
    }

    /// The value, or why there is none, for `?` in functions that cannot go on without it.
    /// Absent and unknown both become the `Err` reason: say which where the caller judges.
    pub fn into_result(self) -> Result<T, String> {
        match self {
            Reading::Value(v) => Ok(v),
            Reading::Absent(w) | Reading::Unknown(w) => Err(w),
        }
    }
}

impl<T: Copy> Reading<&T> {
    pub fn copied(self) -> Reading<T> {
        self.map(|v| *v)
    }
}

impl<T: Clone> Reading<&T> {
    pub fn cloned(self) -> Reading<T> {
        self.map(Clone::clone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_is_one_key() {
        let v: Reading<u32> = Reading::Value(5);
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"{"value":5}"#);
        let a: Reading<u32> = Reading::absent("no such attribute");
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"absent":"no such attribute"}"#
        );
        let u: Reading<u32> = Reading::unknown("permission denied");
        assert_eq!(
            serde_json::to_string(&u).unwrap(),
            r#"{"unknown":"permission denied"}"#
        );
        let unit: Reading<()> = Reading::Value(());
        assert_eq!(serde_json::to_string(&unit).unwrap(), r#"{"value":null}"#);
        for r in [v, a, u] {
            let back: Reading<u32> =
                serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
            assert_eq!(back, r);
        }
    }

    /// Reports written before this shape carried serde's `Result` encoding.
    #[test]
    fn older_ok_and_err_read_back() {
        let v: Reading<bool> = serde_json::from_str(r#"{"Ok":true}"#).unwrap();
        assert_eq!(v, Reading::Value(true));
        let u: Reading<bool> = serde_json::from_str(r#"{"Err":"CUDA_ERROR_X"}"#).unwrap();
        assert_eq!(u, Reading::unknown("CUDA_ERROR_X"));
        let unit: Reading<()> = serde_json::from_str(r#"{"Ok":null}"#).unwrap();
        assert_eq!(unit, Reading::Value(()));
        assert!(serde_json::from_str::<Reading<bool>>(r#"{"value":true,"unknown":"x"}"#).is_err());
    }

    #[test]
    fn helpers_keep_the_reason() {
        let r: Reading<u32> = Reading::from_result(Err::<u32, _>("denied"));
        assert_eq!(r, Reading::unknown("denied"));
        assert_eq!(r.why(), Some("denied"));
        assert_eq!(r.value(), None);
        let a: Reading<u32> = Reading::absent("none");
        assert_eq!(a.clone().map(|x| x + 1), Reading::absent("none"));
        assert_eq!(a.into_result(), Err("none".to_string()));
        let v = Reading::Value(2u32);
        assert_eq!(v.as_ref().copied().map(|x| x * 2), Reading::Value(4));
        assert_eq!(v.value(), Some(&2));
        assert!(v.is_value() && v.why().is_none());
    }
}
