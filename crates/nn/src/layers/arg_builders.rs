//! [`arg_builders!`]: a layer's builder methods that set one of its ember-tensor arguments
//! (`ConvArgs`, `MaxPoolArgs`, `InterpolateArgs`, ...) through that type's own builder, so
//! that what `stride(2)` or `padding(Padding::Same)` means is said once, in ember-tensor.

/// Builder methods `$name(self, value: $ty) -> Self`, each calling the arguments' `$name`.
///
/// - `arg_builders!(field args; ...)`: the arguments are the layer's field `args`;
/// - `arg_builders!(via args, with_args; ...)`: the layer reads them with `self.args()` and
///   rebuilds itself from them with `self.with_args(args)` (options that keep the
///   arguments' fields beside their own).
macro_rules! arg_builders {
    (field $field:ident; $($(#[$doc:meta])* $name:ident($ty:ty);)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $ty) -> Self {
                self.$field = self.$field.$name(value);
                self
            }
        )*
    };
    (via $get:ident, $set:ident; $($(#[$doc:meta])* $name:ident($ty:ty);)*) => {
        $(
            $(#[$doc])*
            pub fn $name(self, value: $ty) -> Self {
                let args = self.$get().$name(value);
                self.$set(args)
            }
        )*
    };
}

pub(crate) use arg_builders;
