"""The upstream CCMs as peers of polyccm's switch tests: building and running them
(``builds``, ``run``), recording what a CCM asks of its cloud (:mod:`.recording`) and keeping
what upstream did where it cannot run (:mod:`.goldens`)."""
