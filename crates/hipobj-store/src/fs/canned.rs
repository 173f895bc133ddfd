//! Canned ACLs (`private`, `public-read`, `public-read-write`,
//! `authenticated-read`, and for objects `bucket-owner-read` and
//! `bucket-owner-full-control`) on buckets and objects, and the checks that
//! let a requester other than the bucket's owner read or write what they
//! grant (`crate::Requester`, set by the access policy).
//!
//! Only canned ACLs: a bucket's is one of its settings (`settings`), an
//! object's is in its record. Grants to particular accounts or e-mail addresses are not
//! served (501); an ACL sent as XML is accepted when it is one of the canned
//! ones written out. What a canned ACL grants, as S3: the owner has
//! FULL_CONTROL; `public-read` adds READ for everyone (AllUsers),
//! `public-read-write` READ and WRITE for everyone, `authenticated-read`
//! READ for every signed requester (AuthenticatedUsers). READ on a bucket
//! lists it, WRITE on a bucket writes and deletes objects in it, READ on an
//! object reads it. Nobody but the owner reads or changes an ACL.

use s3s::dto;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use serde::{Deserialize, Serialize};

use crate::Requester;

const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";

/// A canned ACL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Canned {
    #[default]
    Private,
    PublicRead,
    PublicReadWrite,
    AuthenticatedRead,
    BucketOwnerRead,
    BucketOwnerFullControl,
}

/// What an ACL can grant beyond the owner's full control.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Read,
    Write,
}

impl Canned {
    /// The ACL a header names (`None`: no header); an object's ACLs
    /// include the two bucket-owner ones, which with one owner are private.
    pub(super) fn parse(v: Option<&str>, object: bool) -> S3Result<Option<Self>> {
        let Some(v) = v else { return Ok(None) };
        Ok(Some(match v {
            "private" => Self::Private,
            "public-read" => Self::PublicRead,
            "public-read-write" => Self::PublicReadWrite,
            "authenticated-read" => Self::AuthenticatedRead,
            "bucket-owner-read" if object => Self::BucketOwnerRead,
            "bucket-owner-full-control" if object => Self::BucketOwnerFullControl,
            other => {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidArgument,
                    format!("{other} is not a canned ACL"),
                ));
            }
        }))
    }

    /// The header value naming the ACL.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::PublicRead => "public-read",
            Self::PublicReadWrite => "public-read-write",
            Self::AuthenticatedRead => "authenticated-read",
            Self::BucketOwnerRead => "bucket-owner-read",
            Self::BucketOwnerFullControl => "bucket-owner-full-control",
        }
    }

    /// Whether `who` may do `what` under this ACL.
    /// Whether the ACL grants anything to others than the owner.
    pub(super) fn is_public(self) -> bool {
        matches!(
            self,
            Self::PublicRead | Self::PublicReadWrite | Self::AuthenticatedRead
        )
    }

    pub(super) fn allows(self, who: &Requester, what: Access) -> bool {
        matches!(
            (who, self, what),
            (Requester::Owner, ..)
                | (_, Self::PublicRead | Self::PublicReadWrite, Access::Read)
                | (_, Self::PublicReadWrite, Access::Write)
                | (Requester::Other, Self::AuthenticatedRead, Access::Read)
        )
    }

    fn group_grants(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Self::PublicRead => vec![(ALL_USERS, dto::Permission::READ)],
            Self::PublicReadWrite => vec![
                (ALL_USERS, dto::Permission::READ),
                (ALL_USERS, dto::Permission::WRITE),
            ],
            Self::AuthenticatedRead => vec![(AUTHENTICATED_USERS, dto::Permission::READ)],
            _ => Vec::new(),
        }
    }

    /// The ACL as GetBucketAcl and GetObjectAcl answer it: the group
    /// grants, then the owner's (the order S3 answers in).
    pub(super) fn grants(self, owner: &dto::Owner) -> dto::Grants {
        let mut out: dto::Grants = self
            .group_grants()
            .into_iter()
            .map(|(uri, permission)| dto::Grant {
                grantee: Some(dto::Grantee {
                    display_name: None,
                    id: None,
                    type_: dto::Type::from_static(dto::Type::GROUP),
                    email_address: None,
                    uri: Some(uri.to_owned()),
                }),
                permission: Some(dto::Permission::from_static(permission)),
            })
            .collect();
        out.push(dto::Grant {
            grantee: Some(dto::Grantee {
                display_name: owner.display_name.clone(),
                id: owner.id.clone(),
                type_: dto::Type::from_static(dto::Type::CANONICAL_USER),
                email_address: None,
                uri: None,
            }),
            permission: Some(dto::Permission::from_static(dto::Permission::FULL_CONTROL)),
        });
        out
    }

    /// What a PutBucketAcl or PutObjectAcl sets: the `x-amz-acl` header
    /// or the XML policy, exactly one of them; `is_account` says which
    /// user ids name accounts of this server.
    pub(super) fn of_request(
        header: Option<&str>,
        policy: Option<&dto::AccessControlPolicy>,
        (owner, is_account): (&dto::Owner, &dyn Fn(&str) -> bool),
        object: bool,
    ) -> S3Result<Self> {
        match (header, policy) {
            (Some(a), None) => Ok(Self::parse(Some(a), object)?.unwrap_or_default()),
            (None, Some(p)) => Self::of_policy(p, owner, is_account),
            _ => Err(s3_error!(
                InvalidRequest,
                "give either the x-amz-acl header or an AccessControlPolicy body"
            )),
        }
    }

    /// The canned ACL an XML policy writes out. A grant to a user id that
    /// names no account is `400 InvalidArgument` and one to an e-mail
    /// address `400 UnresolvableGrantByEmailAddress` (no account here has
    /// one), as S3 answers them; grants to other accounts, and group
    /// grants that make no canned ACL, are 501.
    pub(super) fn of_policy(
        p: &dto::AccessControlPolicy,
        owner: &dto::Owner,
        is_account: &dyn Fn(&str) -> bool,
    ) -> S3Result<Self> {
        let mut groups: Vec<(String, String)> = Vec::new();
        for g in p.grants.iter().flatten() {
            let (Some(who), Some(perm)) = (&g.grantee, &g.permission) else {
                return Err(s3_error!(
                    MalformedACLError,
                    "a grant names no grantee or no permission"
                ));
            };
            match (who.type_.as_str(), who.uri.as_deref(), who.id.as_deref()) {
                (dto::Type::GROUP, Some(uri), _) => groups.push((uri.to_owned(), perm.as_str().to_owned())),
                // The owner keeps full control whatever the policy says.
                (dto::Type::CANONICAL_USER, _, Some(id))
                    if Some(id) == owner.id.as_deref() && perm.as_str() == dto::Permission::FULL_CONTROL => {}
                (dto::Type::CANONICAL_USER, _, Some(id)) if !is_account(id) => {
                    return Err(s3_error!(InvalidArgument, "Invalid id"));
                }
                (dto::Type::AMAZON_CUSTOMER_BY_EMAIL, _, _) => {
                    return Err(S3Error::with_message(
                        S3ErrorCode::UnresolvableGrantByEmailAddress,
                        "The e-mail address you provided does not match any account on record.",
                    ));
                }
                (dto::Type::CANONICAL_USER, _, Some(_)) => {
                    return Err(S3Error::with_message(
                        S3ErrorCode::NotImplemented,
                        "grants to accounts other than the owner are not implemented by this server (canned ACLs only)",
                    ));
                }
                _ => {
                    return Err(S3Error::with_message(
                        S3ErrorCode::NotImplemented,
                        "grants of this kind are not implemented by this server (canned ACLs only)",
                    ));
                }
            }
        }
        groups.sort();
        for c in [
            Self::Private,
            Self::PublicRead,
            Self::PublicReadWrite,
            Self::AuthenticatedRead,
        ] {
            let mut want: Vec<(String, String)> = c
                .group_grants()
                .into_iter()
                .map(|(u, p)| (u.to_owned(), p.to_owned()))
                .collect();
            want.sort();
            if want == groups {
                return Ok(c);
            }
        }
        Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            "this combination of group grants is not a canned ACL, and only canned ACLs are implemented by this server",
        ))
    }
}

/// Refuses `who` unless `acl` allows `what`: 403, as S3.
pub(super) fn check(acl: Canned, who: &Requester, what: Access) -> S3Result<()> {
    if acl.allows(who, what) {
        Ok(())
    } else {
        Err(s3_error!(AccessDenied))
    }
}

/// Who is asking, from a request's extensions (none: the owner, as for a
/// request the access policy let through untouched).
pub(super) fn requester(ext: &http::Extensions) -> Requester {
    ext.get::<Requester>().cloned().unwrap_or(Requester::Owner)
}
