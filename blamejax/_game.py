class Game: pass
