"""polyccm provider for Amazon Web Services (EC2, ELB, NLB, VPC routes)."""
