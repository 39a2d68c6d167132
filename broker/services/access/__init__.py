"""Who may do what: access keys' RocketMQ SecretKeys (``secrets``), a non-HTTP caller's rights
(``callers``) and the operator grants (``grants``)."""
