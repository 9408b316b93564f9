"""The ledger protocol, client side (docs/protocol.md, "Ledgers" and "Fencing and recovery").

- ``quorum``: write sets and coverage, pure; ``durability``: the LAC of a VOLATILE ledger
  and restarted bookies, pure;
- ``placement``: which bookies an ensemble gets; ``ensemble``: fragment changes;
- ``options``: a ledger's settings (``LedgerOptions``) and the one check of them;
- ``create``: creating a ledger; ``writer``: the single writer (adds, completion, LAC,
  force, close); ``ensemble_change``: the writer replacing the bookies that failed;
  ``explicit_lac``: when the writer tells its bookies the LAC by a message of its own;
- ``readops``: quorum reads shared by readers and recovery; ``recovery``: fencing and
  recovery; ``reader``: reading, LAC reads and tailing; ``lacwatch``: the standing LAC
  watches behind a tailer; ``entry``: the entry readers return; ``tail``: a ledger's
  last stored entry, read without fencing (the read barrier's step);
- ``sync``: the blocking facades of the writer and reader, for the sync client;
- ``context``: what every operation needs (metadata store, bookie connections, settings),
  the one place the simulator swaps in its own.
"""
