//! The code `#[derive(Module)]` writes: `Module::forward` calling the struct's inherent
//! `forward`, and `Module::children` listing the fields.

use crate::attrs::{crate_path, field_attrs};
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned};
use std::collections::HashSet;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Error, Fields, Generics, Index, Member, Path, Result, Type, WherePredicate};

/// One field that takes part: how it is reached, its name and how it registers.
struct Part {
    member: Member,
    name: String,
    flatten: bool,
    ty: Type,
    span: Span,
}

/// The `impl Module` for `input`, reaching ember-nn under `default_crate` unless the struct
/// says otherwise.
pub fn expand(input: &DeriveInput, default_crate: Path) -> Result<TokenStream> {
    let krate = crate_path(&input.attrs)?.unwrap_or(default_crate);
    let fields = match &input.data {
        Data::Struct(s) => &s.fields,
        Data::Enum(e) => return Err(Error::new(e.enum_token.span, "derive(Module) supports structs only")),
        Data::Union(u) => return Err(Error::new(u.union_token.span, "derive(Module) supports structs only")),
    };
    let parts = parts(fields)?;
    let ident = &input.ident;
    let generics = with_bounds(&input.generics, &parts, &krate);
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let registrations = parts.iter().map(|p| {
        let (member, name) = (&p.member, &p.name);
        if p.flatten {
            quote_spanned!(p.span=> let parts = parts.merge(#krate::Module::children(&self.#member));)
        } else {
            quote_spanned!(p.span=> let parts = #krate::ModuleField::add_to(&self.#member, #name, parts);)
        }
    });
    // Spanned at the struct's name so that the lint reports there: a struct without an
    // inherent `forward` would make this call itself.
    let forward = quote_spanned! {ident.span()=>
        #[deny(unconditional_recursion)]
        fn forward(
            &self,
            x: &#krate::__private::Var,
        ) -> #krate::__private::Result<#krate::__private::Var> {
            Self::forward(self, x)
        }
    };
    Ok(quote! {
        impl #impl_generics #krate::Module for #ident #ty_generics #where_clause {
            #forward

            fn children(&self) -> #krate::Parts<'_> {
                let parts = #krate::Parts::new();
                #(#registrations)*
                parts
            }
        }
    })
}

/// The fields that take part, in order, with their names; an error for two parts of one
/// name.
fn parts(fields: &Fields) -> Result<Vec<Part>> {
    let mut out = Vec::new();
    let mut names = HashSet::new();
    for (i, field) in fields.iter().enumerate() {
        let attrs = field_attrs(&field.attrs)?;
        if attrs.skip {
            continue;
        }
        let member = match &field.ident {
            Some(ident) => Member::Named(ident.clone()),
            None => Member::Unnamed(Index { index: i as u32, span: field.span() }),
        };
        let name = match (&attrs.rename, &field.ident) {
            (Some(rename), _) => rename.value(),
            (None, Some(ident)) => ident.to_string().trim_start_matches("r#").to_string(),
            (None, None) => i.to_string(),
        };
        if !attrs.flatten && !names.insert(name.clone()) {
            let span = attrs.rename.as_ref().map_or(field.span(), |r| r.span());
            return Err(Error::new(span, format!("two parts are named `{name}`")));
        }
        out.push(Part { member, name, flatten: attrs.flatten, ty: field.ty.clone(), span: field.ty.span() });
    }
    Ok(out)
}

/// `generics` with a bound for each part whose type uses a type parameter: `T: ModuleField`,
/// or `T: Module` for a flattened one.
fn with_bounds(generics: &Generics, parts: &[Part], krate: &Path) -> Generics {
    let params: HashSet<String> = generics.type_params().map(|p| p.ident.to_string()).collect();
    let mut out = generics.clone();
    if params.is_empty() {
        return out;
    }
    let clause = out.make_where_clause();
    for p in parts {
        let ty = &p.ty;
        if !mentions(quote!(#ty), &params) {
            continue;
        }
        let bound: WherePredicate = if p.flatten {
            syn::parse_quote!(#ty: #krate::Module)
        } else {
            syn::parse_quote!(#ty: #krate::ModuleField)
        };
        clause.predicates.push(bound);
    }
    out
}

/// Whether `tokens` name one of `params`.
fn mentions(tokens: TokenStream, params: &HashSet<String>) -> bool {
    tokens.into_iter().any(|t| match t {
        TokenTree::Ident(i) => params.contains(&i.to_string()),
        TokenTree::Group(g) => mentions(g.stream(), params),
        _ => false,
    })
}
