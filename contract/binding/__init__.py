"""The host binding and the confirmation gate, as spec/host-wiring.md pins them.

The reference server verifies what the conformance harness mints as a test
host, so both sides share this package. Bounds come from spec/limits.json and
schemas from schemas/data/, both through the loader; nothing here restates them.

- ``_model``: constants, limits, claim checkers and the value types (``Binding``, ``TrustedHost``, errors);
- ``_keys``: the host's Ed25519 keys;
- ``_token``: the binding itself, minted and verified;
- ``_ids``: digests and ids bound to a binding (operation digests, scope and capture ids);
- ``_confirmation``: server-initiated confirmation and its sealed request state;
- ``_reference``: host-reference confirmation.
"""

from engram_mcp.contract.binding._confirmation import (
    ConfirmationSealer,
    ConfirmationState,
    GateVerdict,
    Sealer,
    check_retry,
    confirmation_message,
    confirmation_required,
    is_approval,
    supports_form_elicitation,
)
from engram_mcp.contract.binding._ids import (
    capture_candidate_id,
    capture_source_ref,
    idempotency_intent,
    journal_event_id,
    operation_digest,
    operation_target,
    scope_ref,
)
from engram_mcp.contract.binding._keys import (
    generate_host_key,
    load_private_key,
    load_public_key,
    private_key_pem,
    public_key_pem,
)
from engram_mcp.contract.binding._model import (
    BINDING_ALGORITHM,
    BINDING_CLOCK_SKEW,
    BINDING_MAX_LIFETIME,
    BINDING_TOKEN_TYPE,
    CAPTURE_SEQUENCE,
    CLIENT_CAPABILITIES_META_KEY,
    CONFIRMATION_EXECUTE_WITHIN,
    CONFIRMATION_INPUT_KEY,
    CONFIRMATION_MESSAGES,
    CONFIRMATION_REF_META_KEY,
    CONFIRMATION_REQUESTED_SCHEMA,
    CONFIRMATION_TTL_MAX,
    ELICITATION_SINCE,
    HOST_BINDING_META_KEY,
    REFERENCE_TOKEN_TYPE,
    REQUEST_STATE_AAD,
    Binding,
    BindingReason,
    BindingRejected,
    StateRejected,
    TrustedHost,
    binding_claims_valid,
)
from engram_mcp.contract.binding._reference import (
    CONFIRMATION_MODES,
    ConfirmationMode,
    ReferenceVerdict,
    approval_too_old,
    check_reference,
    host_kid,
    mint_confirmation_reference,
    reference_consume_id,
)
from engram_mcp.contract.binding._token import (
    SignedClaims,
    deadline_passed,
    mint_binding,
    new_audit_id,
    signed_claims,
    verify_binding,
)

__all__ = [
    "BINDING_ALGORITHM",
    "BINDING_CLOCK_SKEW",
    "BINDING_MAX_LIFETIME",
    "BINDING_TOKEN_TYPE",
    "CAPTURE_SEQUENCE",
    "CLIENT_CAPABILITIES_META_KEY",
    "CONFIRMATION_EXECUTE_WITHIN",
    "CONFIRMATION_INPUT_KEY",
    "CONFIRMATION_MESSAGES",
    "CONFIRMATION_MODES",
    "CONFIRMATION_REF_META_KEY",
    "CONFIRMATION_REQUESTED_SCHEMA",
    "CONFIRMATION_TTL_MAX",
    "ELICITATION_SINCE",
    "HOST_BINDING_META_KEY",
    "REFERENCE_TOKEN_TYPE",
    "REQUEST_STATE_AAD",
    "Binding",
    "BindingReason",
    "BindingRejected",
    "ConfirmationMode",
    "ConfirmationSealer",
    "ConfirmationState",
    "GateVerdict",
    "ReferenceVerdict",
    "Sealer",
    "SignedClaims",
    "StateRejected",
    "TrustedHost",
    "approval_too_old",
    "binding_claims_valid",
    "capture_candidate_id",
    "capture_source_ref",
    "check_reference",
    "check_retry",
    "confirmation_message",
    "confirmation_required",
    "deadline_passed",
    "generate_host_key",
    "host_kid",
    "idempotency_intent",
    "is_approval",
    "journal_event_id",
    "load_private_key",
    "load_public_key",
    "mint_binding",
    "mint_confirmation_reference",
    "new_audit_id",
    "operation_digest",
    "operation_target",
    "private_key_pem",
    "public_key_pem",
    "reference_consume_id",
    "scope_ref",
    "signed_claims",
    "supports_form_elicitation",
    "verify_binding",
]
