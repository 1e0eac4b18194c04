//! The type byte of a frame: which message its payload holds.

/// The type byte of a frame: which [`crate::Message`] its payload holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageKind {
    /// [`crate::Message::Begin`].
    Begin = 1,
    /// [`crate::Message::Ready`].
    Ready = 2,
    /// [`crate::Message::Pages`].
    Pages = 3,
    /// [`crate::Message::Zero`].
    Zero = 4,
    /// [`crate::Message::RoundEnd`].
    RoundEnd = 5,
    /// [`crate::Message::Finish`].
    Finish = 6,
    /// [`crate::Message::Done`].
    Done = 7,
    /// [`crate::Message::Abort`].
    Abort = 8,
    /// [`crate::Message::Remote`].
    Remote = 9,
    /// [`crate::Message::Want`].
    Want = 10,
    /// [`crate::Message::Resume`].
    Resume = 11,
}

impl MessageKind {
    /// Every kind, in type-byte order.
    pub const ALL: [MessageKind; 11] = [
        MessageKind::Begin,
        MessageKind::Ready,
        MessageKind::Pages,
        MessageKind::Zero,
        MessageKind::RoundEnd,
        MessageKind::Finish,
        MessageKind::Done,
        MessageKind::Abort,
        MessageKind::Remote,
        MessageKind::Want,
        MessageKind::Resume,
    ];

    /// The kind a type byte names, if any.
    pub const fn from_byte(byte: u8) -> Option<MessageKind> {
        match byte {
            1 => Some(MessageKind::Begin),
            2 => Some(MessageKind::Ready),
            3 => Some(MessageKind::Pages),
            4 => Some(MessageKind::Zero),
            5 => Some(MessageKind::RoundEnd),
            6 => Some(MessageKind::Finish),
            7 => Some(MessageKind::Done),
            8 => Some(MessageKind::Abort),
            9 => Some(MessageKind::Remote),
            10 => Some(MessageKind::Want),
            11 => Some(MessageKind::Resume),
            _ => None,
        }
    }

    /// The type byte.
    pub const fn to_byte(self) -> u8 {
        self as u8
    }

    /// The message's name, for error messages ("Pages").
    pub const fn name(self) -> &'static str {
        match self {
            MessageKind::Begin => "Begin",
            MessageKind::Ready => "Ready",
            MessageKind::Pages => "Pages",
            MessageKind::Zero => "Zero",
            MessageKind::RoundEnd => "RoundEnd",
            MessageKind::Finish => "Finish",
            MessageKind::Done => "Done",
            MessageKind::Abort => "Abort",
            MessageKind::Remote => "Remote",
            MessageKind::Want => "Want",
            MessageKind::Resume => "Resume",
        }
    }

    /// A type byte described for an error message: its name, or "unknown kind 0x09".
    pub fn describe_byte(byte: u8) -> String {
        match MessageKind::from_byte(byte) {
            Some(kind) => kind.name().to_string(),
            None => format!("unknown kind {byte:#04x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_maps_consistently() {
        for byte in 0..=u8::MAX {
            match MessageKind::from_byte(byte) {
                Some(kind) => {
                    assert_eq!(kind.to_byte(), byte);
                    assert_eq!(MessageKind::describe_byte(byte), kind.name());
                }
                None => assert!(MessageKind::describe_byte(byte).starts_with("unknown kind 0x")),
            }
        }
        for (index, kind) in MessageKind::ALL.iter().enumerate() {
            assert_eq!(usize::from(kind.to_byte()), index + 1);
        }
    }
}
