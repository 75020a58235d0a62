"""Conference rooms: who is in a room, whether it has started, who talks and who leaves.
Sans-IO: the rooms take the time and the participants' doings and say what follows; the
media tick mixes what they say (:mod:`callhook.media.mixing`)."""
