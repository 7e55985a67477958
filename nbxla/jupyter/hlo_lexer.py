"""A Pygments lexer for HLO text, as nbxla and XLA print it.

It is used directly by the stage viewer; nothing is registered with Pygments, so importing
nbxla never changes which lexer ``pygments.lexers.get_lexer_by_name`` finds.

    %add.7 = f32[100,100]{1,0} add(f32[100,100]{1,0} %x, ...), metadata={source_line=5}
    ^name    ^shape (type)     ^opcode                          ^attribute  ^number
"""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups
from pygments.token import (Comment, Keyword, Name, Number, Operator, Punctuation, String, Text,
                            Whitespace)

# Element types of HLO shapes (xla::PrimitiveType spellings).
_TYPES = (r"(?:pred|s2|s4|s8|s16|s32|s64|u2|u4|u8|u16|u32|u64|f16|bf16|f32|f64|c64|c128"
          r"|f8e4m3fn|f8e5m2|f8e4m3b11fnuz|f8e4m3fnuz|f8e5m2fnuz|token|opaque)")


class HloLexer(RegexLexer):
    name = "HLO"
    aliases = ["hlo"]
    filenames = ["*.hlo"]

    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"//.*?$", Comment.Single),
            (r"/\*", Comment.Multiline, "block_comment"),
            (r"\b(HloModule|ENTRY|ROOT)\b", Keyword),
            (r'"(?:[^"\\]|\\.)*"', String),
            # a shape's element type and dimensions, then an optional layout: f32[8,8]{1,0}
            (r"\b(" + _TYPES + r")(\[[0-9?<=,\s]*\])(\{[0-9,:A-Z()\s]*\})?",
             bygroups(Keyword.Type, Keyword.Type, Keyword.Type)),
            (r"%[\w.\-]+", Name.Variable),
            (r"\b(k[A-Z]\w*)\b", Name.Constant),                     # kLoop, kInput, ...
            (r"\b([a-z_][\w\-]*)(=)", bygroups(Name.Attribute, Operator)),
            (r"\b([a-z][a-z0-9\-]*)(?=\()", Name.Function),          # opcode before its operands
            (r"[-+]?\b(?:inf|nan)\b", Number.Float),
            (r"[-+]?\d+\.\d*(?:[eE][-+]?\d+)?|[-+]?\d+[eE][-+]?\d+", Number.Float),
            (r"[-+]?\d+", Number.Integer),
            (r"->|=", Operator),
            (r"[(){}\[\],:;]", Punctuation),
            (r"[\w.\-]+", Text),
            (r".", Text),
        ],
        "block_comment": [
            (r"[^*]+", Comment.Multiline),
            (r"\*/", Comment.Multiline, "#pop"),
            (r"\*", Comment.Multiline),
        ],
    }
