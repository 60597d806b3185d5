//! The `#[module(..)]` attributes: on the struct (`crate = "path"`) and on its fields
//! (`skip`, `flatten`, `rename = "name"`).

use syn::spanned::Spanned;
use syn::{Attribute, Error, LitStr, Path, Result};

/// What a field's attributes ask for.
#[derive(Default)]
pub struct FieldAttrs {
    /// Not part of the module (sizes, options, caches).
    pub skip: bool,
    /// The field's own parts become the struct's, without a name prefix.
    pub flatten: bool,
    /// The name in parameter names and state-dict keys, instead of the field's.
    pub rename: Option<LitStr>,
}

/// Reads the `#[module(..)]` attributes of a field.
pub fn field_attrs(attrs: &[Attribute]) -> Result<FieldAttrs> {
    let mut out = FieldAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                out.skip = true;
            } else if meta.path.is_ident("flatten") {
                out.flatten = true;
            } else if meta.path.is_ident("rename") {
                let name: LitStr = meta.value()?.parse()?;
                if name.value().is_empty() || name.value().contains('.') {
                    return Err(Error::new(name.span(), "a part's name must be non-empty and hold no `.`"));
                }
                out.rename = Some(name);
            } else {
                return Err(meta.error("unknown field attribute; expected `skip`, `flatten` or `rename = \"name\"`"));
            }
            Ok(())
        })?;
        let exclusive = [out.skip, out.flatten, out.rename.is_some()].iter().filter(|&&on| on).count();
        if exclusive > 1 {
            return Err(Error::new(attr.span(), "`skip`, `flatten` and `rename` exclude each other"));
        }
    }
    Ok(out)
}

/// Reads the struct's `#[module(crate = "path")]`, if any: the path under which the code
/// reaches ember-nn.
pub fn crate_path(attrs: &[Attribute]) -> Result<Option<Path>> {
    let mut out = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let path: LitStr = meta.value()?.parse()?;
                out = Some(path.parse()?);
                Ok(())
            } else {
                Err(meta.error("unknown struct attribute; expected `crate = \"path\"`"))
            }
        })?;
    }
    Ok(out)
}
