"""The results database: its schema (:mod:`.schema`), writing (:mod:`.store`),
reading and export (:mod:`.read`), statistics (:mod:`.stats`) and the HTML
report (:mod:`.report`)."""
